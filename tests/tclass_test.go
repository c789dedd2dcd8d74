package tests

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/wire"
)

// TestVerbsTrafficClass: perftest's --tclass (the GRH traffic class of
// ibv_modify_qp's address vector) and, over rdma_cm, its -T
// (rdma_set_option's RDMA_OPTION_ID_TOS) set the IP traffic class of every
// WRITE of the test, as the daemon's capture shows them sent and received.
// (With -R perftest exchanges its parameters over a connection of its own,
// with no TOS.)
func TestVerbsTrafficClass(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ib_write_bw")
	for _, c := range []struct {
		name  string
		args  []string
		class uint8
	}{
		{"tclass", []string{"--tclass=184"}, 184},
		{"rdma_cm TOS", []string{"-R", "-T", "104"}, 104},
	} {
		t.Run(c.name, func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "serve.pcap")
			h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0", "--pcap", pcap)
			args := append([]string{"ib_write_bw", "-F", "-p", freePort(), "-s", "4096", "-n", "20"}, c.args...)
			runPair(t, verbsTopology{"one daemon", h, h}, 30*time.Second, args, append(args, h.ip()))
			// The daemon writes its capture out every second.
			var counts map[uint8]int
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if counts = writeClasses(t, pcap); counts[c.class] >= 2*20 {
					break
				}
			}
			// Each WRITE is captured sent and received: 20 WRITEs at least
			// (perftest warms up with more).
			if len(counts) != 1 || counts[c.class] < 2*20 {
				t.Errorf("WRITE packets by traffic class: %v, want 20 WRITEs, captured twice each, with class %d alone", counts, c.class)
			}
		})
	}
}

// writeClasses counts the RDMA WRITE packets of the capture at path by
// traffic class.
func writeClasses(t *testing.T, path string) map[uint8]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[uint8]int{}
	r, err := wire.NewPcapReader(f)
	if errors.Is(err, io.EOF) {
		return counts // not written yet
	}
	if err != nil {
		t.Fatal(err)
	}
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return counts // the last record may be half written
		}
		if err != nil {
			t.Fatal(fmt.Errorf("%s: %w", path, err))
		}
		if fr.RoCE && len(fr.Payload) >= wire.BTHSize && wire.BTH(fr.Payload).OpCode().IsWrite() {
			counts[fr.Env.TrafficClass]++
		}
	}
}
