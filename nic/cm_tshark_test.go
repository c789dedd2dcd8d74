package nic_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/wire"
)

// syncBuffer is a bytes.Buffer the devices' goroutines write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.b.Bytes())
}

// TestTsharkCMCapture captures a softnic-to-softnic connection (handshake,
// a WRITE and a SEND each way, disconnection) with PcapTrace and has
// Wireshark's dissector read it: the CM MADs show as "CM: ConnectRequest",
// "CM: ConnectReply", "CM: ReadyToUse", "CM: DisconnectRequest", "CM:
// DisconnectReply", and no packet is malformed. It runs when tshark is
// installed (.ci/run installs Debian's).
func TestTsharkCMCapture(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH; install Debian's tshark to run this test")
	}
	nictest.CheckLeaks(t)
	var file syncBuffer
	w, err := wire.NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nic.Config{Trace: nic.PcapTrace(w, false, func(err error) { t.Error(err) })}
	a, b := openCMEnd(t, cfg), openCMEnd(t, cfg)
	l := b.listen(t, 0)
	opts := a.dialOptions()
	opts.PrivateData = []byte("captured")
	c, s := connectCM(t, a, b, l, opts, nic.AcceptOptions{PrivateData: []byte("by tshark")})
	cmExchange(t, a, b, c, s)
	c.Close()
	<-s.Done()
	s.Close()
	a.dev.Close()
	b.dev.Close()

	path := filepath.Join(t.TempDir(), "cm.pcap")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The devices listen on ephemeral ports, not 4791: tell the dissector.
	out, err := exec.Command(tshark, "-n", "-r", path, "-o", fmt.Sprintf("infiniband.rroce.port:%d", b.dev.Addr().Port()),
		"-T", "fields", "-E", "separator=/t",
		"-e", "_ws.col.Info", "-e", "_ws.malformed", "-e", "infiniband.bth.destqp").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var cm []string
	packets := 0
	for line := range strings.Lines(strings.TrimRight(string(out), "\n")) {
		packets++
		cols := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(cols) != 3 {
			t.Fatalf("tshark line %q", line)
		}
		if cols[1] != "" {
			t.Errorf("tshark marks packet %d malformed: %s", packets, line)
		}
		if cols[2] == "0x000001" {
			cm = append(cm, strings.TrimSpace(cols[0]))
		}
	}
	want := []string{"CM: ConnectRequest", "CM: ConnectReply", "CM: ReadyToUse", "CM: DisconnectRequest", "CM: DisconnectReply"}
	if !slices.Equal(cm, want) {
		t.Errorf("tshark shows the CM MADs as %q, want %q", cm, want)
	}
	if packets <= len(want) {
		t.Errorf("%d packets captured, want the data exchange too", packets)
	}
}
