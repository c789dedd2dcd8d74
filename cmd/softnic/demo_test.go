package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/softnic/softnic/cmd/softnic/internal/decode"
	"github.com/softnic/softnic/cmd/softnic/internal/demo"
	"github.com/softnic/softnic/wire"
)

// demoPackets returns the lines of the packets the demo's NICs sent, each
// without its time, and checks that every one is a well-formed line with a
// good ICRC. A packet the receiver dropped is printed again with a note on
// the next line; it is left out.
func demoPackets(t *testing.T, lines []string) []string {
	t.Helper()
	var pkts []string
	for i, l := range lines {
		if l == "" || l[0] < '0' || l[0] > '9' || i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    (at the receiver: ") {
			continue
		}
		m := packetLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q looks like a packet line but is not one", l)
		}
		if m[5] != "ok" {
			t.Errorf("bad ICRC: %s", l)
		}
		pkts = append(pkts, strings.TrimPrefix(l, m[1]+" "))
	}
	return pkts
}

// TestDemo runs the demo at every MTU and checks what it prints: each step
// explained and ok, the packets of each step, and a capture holding
// exactly the packets printed.
func TestDemo(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		t.Run(fmt.Sprint("mtu ", mtu), func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "demo.pcap")
			code, stdout, stderr := runCmd("demo", "--mtu", fmt.Sprint(mtu), "--pcap", pcap)
			if code != 0 || stderr != "" {
				t.Fatalf("exit status %d, stderr %q\n%s", code, stderr, stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			pkts := demoPackets(t, lines)

			// Each step: a heading, one explaining line, then packets, then ok.
			step := 0
			packetsOf := map[string][]string{}
			for i := 0; i < len(lines); i++ {
				if !strings.HasPrefix(lines[i], "== ") {
					continue
				}
				step++
				title := demo.Titles()[step-1]
				if want := fmt.Sprintf("== %d. %s", step, title); lines[i] != want {
					t.Errorf("heading %q, want %q", lines[i], want)
				}
				if i+1 >= len(lines) || !strings.HasSuffix(lines[i+1], ".") || strings.Contains(lines[i+1], "\n") {
					t.Errorf("step %d is not explained by a sentence: %q", step, lines[i+1])
				}
				j := i + 2
				for ; j < len(lines) && !strings.HasPrefix(lines[j], "ok: ") && !strings.HasPrefix(lines[j], "== "); j++ {
					packetsOf[title] = append(packetsOf[title], lines[j])
				}
				if j == len(lines) || !strings.HasPrefix(lines[j], "ok: ") {
					t.Errorf("step %d (%s) has no ok line", step, title)
				}
			}
			if step != len(demo.Titles()) {
				t.Errorf("%d steps printed, want %d", step, len(demo.Titles()))
			}
			if hint := lines[len(lines)-1]; !strings.Contains(hint, "softnic decode") || !strings.HasSuffix(hint, pcap) && !strings.HasSuffix(hint, pcap+".") {
				t.Errorf("last line %q does not show how to read the capture", hint)
			}

			segments := (demo.WriteLen + mtu - 1) / mtu
			// count counts the packets of a step whose opcode name starts with op.
			count := func(title, op string) int {
				n := 0
				for _, l := range packetsOf[title] {
					if m := packetLine.FindStringSubmatch(l); m != nil && strings.HasPrefix(m[4], op+" ") {
						n++
					}
				}
				return n
			}
			for _, c := range []struct {
				title, op string
				want      int
			}{
				{"register memory", "RC", 0},
				{"RDMA WRITE", "RC RDMA Write", segments},
				{"RDMA WRITE", "RC Acknowledge", 1},
				{"RDMA READ", "RC RDMA Read Request", 1},
				{"RDMA READ", "RC RDMA Read Response", segments},
				{"ATOMIC FETCH_ADD", "RC Fetch Add", 1},
				{"ATOMIC FETCH_ADD", "RC Atomic Acknowledge", 1},
				{"ATOMIC COMPARE_SWAP", "RC Compare Swap", 1},
				{"SEND / RECV", "RC Send", 1},
				{"RDMA WRITE WITH IMMEDIATE", "RC RDMA Write", 1},
				{"a bad rkey", "RC RDMA Write", 1},
				{"a bad rkey", "RC Acknowledge", 1},
			} {
				if got := count(c.title, c.op); got != c.want {
					t.Errorf("%s: %d %q packets, want %d:\n%s", c.title, got, c.op, c.want, strings.Join(packetsOf[c.title], "\n"))
				}
			}
			if nak := packetsOf["a bad rkey"]; len(nak) < 2 || !strings.Contains(nak[len(nak)-1], "syndrome=NAK(remote access error)") {
				t.Errorf("the bad rkey step does not end with the NAK:\n%s", strings.Join(nak, "\n"))
			}
			if !strings.Contains(stdout, "(REM_ACCESS_ERR); both QPs are in state ERR.") {
				t.Error("the REM_ACCESS_ERR completion is not explained")
			}

			// The capture holds the same packets, in the same order.
			if got := capturedPackets(t, pcap); strings.Join(got, "\n") != strings.Join(pkts, "\n") {
				t.Errorf("the capture's packets differ from the printed ones:\ncapture:\n%s\nprinted:\n%s", strings.Join(got, "\n"), strings.Join(pkts, "\n"))
			}
		})
	}
}

// openCapture opens the capture at path for reading; the file is closed
// when the test ends.
func openCapture(t *testing.T, path string) *wire.PcapReader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r, err := wire.NewPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// capturedPackets reads a capture of the demo and returns each packet's
// line as the demo prints it, without the time. The demo's NICs use ports
// other than 4791, which wire.PcapReader does not take for RoCEv2, so the
// Ethernet, IPv4 and UDP headers wire.PcapWriter puts around each packet
// are taken apart here.
func capturedPackets(t *testing.T, path string) []string {
	t.Helper()
	r := openCapture(t, path)
	const eth, ip, udp = 14, 20, 8
	var (
		lines []string
		p     wire.Packet
	)
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return lines
		}
		if err != nil {
			t.Fatal(err)
		}
		b := fr.Data
		if len(b) < eth+ip+udp || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[eth] != 0x45 || b[eth+9] != 17 {
			t.Fatalf("frame %x is not Ethernet, IPv4 without options and UDP", b)
		}
		env := wire.Envelope{
			Src:  netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[eth+12:])), binary.BigEndian.Uint16(b[eth+ip:])),
			Dst:  netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[eth+16:])), binary.BigEndian.Uint16(b[eth+ip+2:])),
			IPID: binary.BigEndian.Uint16(b[eth+4:]),
		}
		pkt := b[eth+ip+udp:]
		if err := p.Decode(pkt); err != nil {
			t.Fatalf("captured packet %x: %v", pkt, err)
		}
		line := string(decode.AppendPacketLine(nil, 0, &env, &p, decode.ICRCStatus(env.Check(pkt)), 0))
		lines = append(lines, strings.TrimSuffix(strings.TrimPrefix(line, "0.000000 "), "\n"))
	}
}

// TestDemoCM: the connection manager's MADs are printed in the connect and
// disconnect steps.
func TestDemoCM(t *testing.T) {
	code, stdout, stderr := runCmd("demo")
	if code != 0 {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	for _, re := range []string{
		`(?m)^== 2\. connect\n.*\n(.*UD Send Only qp=0x000001 .* CM ConnectRequest .*\n)(.*CM ConnectReply .*\n)(.*CM ReadyToUse .*\n)ok: `,
		`(?m)^== 10\. disconnect\n.*\n(.*CM DisconnectRequest .*\n)(.*CM DisconnectReply .*\n)ok: `,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("output does not match %s:\n%s", re, stdout)
		}
	}
}

func TestDemoBadPcap(t *testing.T) {
	code, stdout, stderr := runCmd("demo", "--pcap", filepath.Join(t.TempDir(), "no", "such", "dir.pcap"))
	if code != 1 || stdout != "" || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestDemoFails: a step that does not complete fails the demo with exit
// status 1, a FAILED line and the reason.
func TestDemoFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the connection manager's Dial gives up at once
	var stdout, stderr bytes.Buffer
	if code := runContext(ctx, []string{"demo"}, &stdout, &stderr); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if !strings.Contains(stdout.String(), "\nFAILED: ") || strings.Contains(stdout.String(), "All 10 steps") {
		t.Errorf("stdout does not show the failure:\n%s", stdout.String())
	}
	if e := stderr.String(); !strings.HasPrefix(e, "softnic demo: step 2 (connect): ") || !strings.HasSuffix(e, "context canceled\n") {
		t.Errorf("stderr %q, want the step and the reason", e)
	}
}
