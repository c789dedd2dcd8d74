package tests

import (
	"context"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// TestLibfabricVerbs: libfabric's verbs provider loads libsoftnic in
// place of rdma-core (it links libefa's and libmlx5's entry points too,
// which answer EOPNOTSUPP) and finds the daemon's device: fi_info lists
// softnic0 for verbs' RC endpoints (FI_EP_MSG) and for verbs;ofi_rxm's
// reliable datagrams over them (FI_EP_RDM), at the daemon's address.
// libfabric offers RC endpoints on a device with an IP address on an
// interface other than loopback, so the daemon is in a network namespace
// (root).
func TestLibfabricVerbs(t *testing.T) {
	bin, lib := needLibsoftnic(t)
	if _, err := exec.LookPath("fi_info"); err != nil {
		t.Skipf("fi_info is not installed (Debian: apt-get install libfabric-bin): %v", err)
	}
	nsA, _, ipA, _ := twoNamespaces(t)
	h := startVerbsHost(t, bin, lib, nsA, ipA+":4791")
	for _, tc := range []struct{ provider, endpoint string }{{"verbs", "FI_EP_MSG"}, {"verbs;ofi_rxm", "FI_EP_RDM"}} {
		t.Run(tc.provider, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := h.program(ctx, "fi_info", "-p", tc.provider, "-n", h.ip(), "-t", tc.endpoint).CombinedOutput()
			want := regexp.MustCompile(`(?m)^provider: ` + regexp.QuoteMeta(tc.provider) + `\n\s+fabric: .*\n\s+domain: softnic0\n(\s+.*\n)*?\s+type: ` + tc.endpoint + `\n`)
			if err != nil || !want.Match(out) {
				t.Errorf("fi_info -p %s -n %s -t %s (%v) does not list softnic0:\n%s", tc.provider, h.ip(), tc.endpoint, err, out)
			}
		})
	}
}
