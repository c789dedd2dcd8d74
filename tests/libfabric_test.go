package tests

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
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

// TestLibfabricRMA moves data through libfabric on libsoftnic:
// testdata/libfabric_rma.c, a server and a client started apart (libfabric
// on libsoftnic cannot fork), over verbs' FI_EP_MSG (rdma_cm) and
// verbs;ofi_rxm's FI_EP_RDM, on one daemon and on two in two network
// namespaces. The program checks every byte of fi_send/fi_recv (64 B,
// 4 KiB, 1 MiB each way), of fi_write and fi_read (64 KiB) on a region
// the server registered, and over FI_EP_RDM of fi_atomic and
// fi_fetch_atomic FI_SUM on a uint64. (libfabric 1.17's verbs FI_EP_MSG
// has no fi_atomic FI_SUM, and its fi_fetch_atomic adds the operand's
// address (ofiwg/libfabric#10923, fixed in 2.2): the program skips both
// there.)
func TestLibfabricRMA(t *testing.T) {
	bin, lib := needLibsoftnic(t)
	if _, err := os.Stat("/usr/include/rdma/fabric.h"); err != nil {
		t.Skipf("libfabric's headers are not installed (Debian: apt-get install libfabric-dev): %v", err)
	}
	prog := compileC(t, "testdata/libfabric_rma.c", "-lfabric")
	nsA, nsB, ipA, ipB := twoNamespaces(t)
	a := startVerbsHost(t, bin, lib, nsA, ipA+":4791")
	b := startVerbsHost(t, bin, lib, nsB, ipB+":4791")
	want := map[string][]string{
		"server": {
			"ok: fi_recv: 64 bytes from the client", "ok: fi_recv: 4096 bytes from the client",
			"ok: fi_recv: 1048576 bytes from the client", "ok: fi_send: 1048576 bytes to the client",
			"ok: the client's fi_write: 65536 bytes in the region", "ok: the client's atomics",
		},
		"client": {
			"ok: fi_recv: 64 bytes from the server", "ok: fi_recv: 4096 bytes from the server",
			"ok: fi_recv: 1048576 bytes from the server", "ok: fi_write: 65536 bytes",
			"ok: fi_read: the 65536 bytes fi_write wrote", "ok: fi_read: 65536 bytes the server wrote",
		},
		"rdm client": {"ok: fi_atomic FI_SUM 5 on a uint64", "ok: fi_fetch_atomic FI_SUM 7 on a uint64: fetched 1005, want 1005"},
	}
	for _, ep := range []string{"msg", "rdm"} {
		for _, tp := range []verbsTopology{{"one daemon", a, a}, {"two daemons", a, b}} {
			t.Run(ep+"/"+tp.name, func(t *testing.T) {
				sout, cout := runLibfabric(t, tp, prog, ep)
				for _, side := range []struct{ name, out string }{{"server", sout}, {"client", cout}, {ep + " client", cout}} {
					for _, line := range want[side.name] {
						if !strings.Contains(side.out, "\n"+line) {
							t.Errorf("the %s did not print %q", side.name, line)
						}
					}
					if !strings.Contains(side.out, "\n0 failed\n") {
						t.Errorf("the %s's checks did not all pass", side.name)
					}
				}
				if t.Failed() {
					t.Logf("server:\n%s\nclient:\n%s", sout, cout)
				}
			})
		}
	}
}

// libfabric_rma's server's lines saying it listens, and that its last
// send completed.
var (
	libfabricReady = regexp.MustCompile(`(?m)^ready$`)
	libfabricSent  = regexp.MustCompile(`(?m)^done sending$`)
)

// runLibfabric runs libfabric_rma's server for endpoint type ep on
// tp.server, then, once it says it is ready, its client on tp.client. It
// closes the client's standard input once the server is done sending, and
// the server's once the client has exited: the client keeps the
// connection until the server has the completion of its last send, the
// server until the client has polled it. Both must exit with status 0
// within 30 s.
func runLibfabric(t *testing.T, tp verbsTopology, prog, ep string) (sout, cout string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := freePort()
	var sbuf, cbuf lockedBuffer
	s := tp.server.program(ctx, prog, ep, "server", tp.server.ip(), port)
	s.Stdout, s.Stderr = &sbuf, &sbuf
	clientExited, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	sdone := make(chan error, 1)
	go func() { sdone <- s.Wait() }()
	waitFor := func(what *regexp.Regexp, exited <-chan error) bool {
		for !what.MatchString(sbuf.String()) {
			select {
			case err := <-exited:
				sdone <- err
				return false
			case <-ctx.Done():
				return false
			case <-time.After(20 * time.Millisecond):
			}
		}
		return true
	}
	if !waitFor(libfabricReady, sdone) {
		t.Fatalf("server not ready:\n%s", sbuf.String())
	}
	c := tp.client.program(ctx, prog, ep, "client", tp.client.ip(), port, tp.server.ip())
	c.Stdout, c.Stderr = &cbuf, &cbuf
	serverSent, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	cdone := make(chan error, 1)
	go func() { cdone <- c.Wait() }()
	waitFor(libfabricSent, sdone)
	serverSent.Close()
	err = <-cdone
	clientExited.Close()
	if err != nil {
		cancel()
	}
	serr := <-sdone
	if err != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", err, cbuf.String(), serr, sbuf.String())
	}
	return sbuf.String(), cbuf.String()
}
