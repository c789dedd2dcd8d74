package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// runCmd runs the command line and returns exit status, stdout and stderr.
func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring, "" for empty
		stderr     string
		noStdout   bool
		emptyError bool
	}{
		{name: "no command", args: nil, code: 2, stderr: "usage: softnic COMMAND", noStdout: true},
		{name: "help", args: []string{"help"}, code: 0, stdout: "decode ", emptyError: true},
		{name: "--help", args: []string{"--help"}, code: 0, stdout: "version ", emptyError: true},
		{name: "help decode", args: []string{"help", "decode"}, code: 0, stdout: "-v\t", emptyError: true},
		{name: "help unknown", args: []string{"help", "frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`, noStdout: true},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`, noStdout: true},
		{name: "decode --help", args: []string{"decode", "--help"}, code: 0, stdout: "example:\n  softnic decode", emptyError: true},
		{name: "decode -h", args: []string{"decode", "-h"}, code: 0, stdout: "usage: softnic decode FILE|- [-v | --json | --ladder]", emptyError: true},
		{name: "decode without file", args: []string{"decode"}, code: 2, stderr: "softnic decode: missing argument\nusage:", noStdout: true},
		{name: "decode two files", args: []string{"decode", "a.pcap", "b.pcap"}, code: 2, stderr: "too many arguments: b.pcap", noStdout: true},
		{name: "decode bad flag", args: []string{"decode", "-x", "a.pcap"}, code: 2, stderr: "flag provided but not defined: -x", noStdout: true},
		{name: "decode missing file", args: []string{"decode", filepath.Join(t.TempDir(), "none.pcap")}, code: 1, stderr: "no such file", noStdout: true},
		{name: "version", args: []string{"version"}, code: 0, stdout: "softnic ", emptyError: true},
		{name: "version with argument", args: []string{"version", "x"}, code: 2, stderr: "too many arguments", noStdout: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) || (tt.noStdout && stdout != "") {
				t.Errorf("stdout %q, want it to contain %q", stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderr) || (tt.emptyError && stderr != "") {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.stderr)
			}
		})
	}
}

// packetLine is a decode line for a well-formed packet.
var packetLine = regexp.MustCompile(`^(\d+\.\d{6}) (\S+) → (\S+) (.+) icrc=(ok|BAD)$`)

// decodeLines runs decode and returns the packet lines and the summary line.
func decodeLines(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, stdout, stderr := runCmd(append([]string{"decode"}, args...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestDecodeReadLarge(t *testing.T) {
	lines, summary := decodeLines(t, golden.Path(t, "read_large.pcap"))
	// README: 5 READ requests and 5 x (First + 6 Middle + Last) responses.
	want := map[string]int{
		"RC RDMA Read Request":         5,
		"RC RDMA Read Response First":  5,
		"RC RDMA Read Response Middle": 30,
		"RC RDMA Read Response Last":   5,
	}
	got := map[string]int{}
	last := -1.0
	for _, l := range lines {
		m := packetLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q is not a packet line", l)
		}
		if m[5] != "ok" {
			t.Errorf("ICRC not ok: %s", l)
		}
		if _, err := netip.ParseAddrPort(m[2]); err != nil {
			t.Errorf("source %q: %v", m[2], err)
		}
		if !strings.HasSuffix(m[3], ":4791") {
			t.Errorf("destination %q is not port 4791", m[3])
		}
		secs, err := strconv.ParseFloat(m[1], 64)
		if err != nil || secs < last {
			t.Errorf("time %q goes backwards or does not parse", m[1])
		}
		last = secs
		name, _, _ := strings.Cut(m[4], " qp=")
		got[name]++
	}
	if len(lines) != 45 {
		t.Errorf("%d packet lines, want one per RoCEv2 frame: 45", len(lines))
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%d %q lines, want %d", got[name], name, n)
		}
	}
	if want := "45 RoCEv2 packets (0 bad ICRC, 0 undecodable), 39 other frames skipped"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
}

// TestDecodeTime: times are relative to the first frame of the file, which
// in read_large.pcap is the TCP connection of perftest's exchange.
func TestDecodeTime(t *testing.T) {
	lines, _ := decodeLines(t, golden.Path(t, "read_large.pcap"))
	// tshark -r read_large.pcap shows the first READ request at 0.028152.
	if !strings.HasPrefix(lines[0], "0.028152 10.77.0.12:") {
		t.Errorf("first line %q, want time 0.028152 from 10.77.0.12", lines[0])
	}
}

func TestDecodeBadICRC(t *testing.T) {
	lines, summary := decodeLines(t, golden.Path(t, "host_badicrc.pcap"))
	bad := 0
	for _, l := range lines {
		if strings.HasSuffix(l, " icrc=BAD") {
			bad++
			if !strings.Contains(l, " 10.77.0.1:") || !strings.Contains(l, "RC Acknowledge") {
				t.Errorf("bad ICRC on a packet other than the host's ACKs: %s", l)
			}
		}
	}
	if bad != 290 {
		t.Errorf("%d icrc=BAD lines, want 290 (golden README)", bad)
	}
	if !strings.HasPrefix(summary, "580 RoCEv2 packets (290 bad ICRC, 0 undecodable)") {
		t.Errorf("summary %q", summary)
	}
}

func TestDecodeVerbose(t *testing.T) {
	path := golden.Path(t, "write_imm.pcap")
	for _, args := range [][]string{{"-v", path}, {path, "-v"}} {
		lines, _ := decodeLines(t, args...)
		packets, bth := 0, 0
		for i, l := range lines {
			if packetLine.MatchString(l) {
				packets++
				if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "  BTH opcode=") {
					t.Fatalf("%v: packet line %q not followed by its BTH", args, l)
				}
			}
			if strings.HasPrefix(l, "  BTH ") {
				bth++
			}
		}
		if packets != 28 || bth != 28 {
			t.Errorf("%v: %d packets, %d BTH lines, want 28 each", args, packets, bth)
		}
		if !strings.Contains(strings.Join(lines, "\n"), "  ImmDT imm=0x00001000") {
			t.Errorf("%v: no ImmDT line", args)
		}
	}
}

// TestDecodeMixed decodes a file written by wire.PcapWriter with a good
// packet, one with a reserved opcode, one with a bad ICRC, and a frame that
// is not RoCEv2.
func TestDecodeMixed(t *testing.T) {
	path := mixedCapture(t)
	lines, summary := decodeLines(t, path)
	want := []string{
		"0.000000 [fd00::1]:49152 → [fd00::2]:4791 RC Acknowledge qp=0x000011 psn=0x000001 ackreq=0 syndrome=NAK(PSN sequence error) msn=3 payload=0 icrc=ok",
		"0.001500 [fd00::1]:49152 → [fd00::2]:4791 undecodable 20-byte datagram: wire: unsupported opcode",
		"0.003000 [fd00::1]:49152 → [fd00::2]:4791 RC Acknowledge qp=0x000011 psn=0x000003 ackreq=0 syndrome=NAK(PSN sequence error) msn=3 payload=0 icrc=BAD",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if want := "3 RoCEv2 packets (1 bad ICRC, 1 undecodable), 1 other frame skipped"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
}

func TestDecodeNotPcap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(path, []byte("these are notes, not packets\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd("decode", path)
	if code != 1 || stdout != "" {
		t.Errorf("exit status %d, stdout %q; want 1 and nothing", code, stdout)
	}
	if !strings.Contains(stderr, "softnic decode: "+path+": wire: not a pcap file") {
		t.Errorf("stderr %q", stderr)
	}
}

// TestDecodeCutFile: a capture cut inside a record prints what it holds,
// then fails.
func TestDecodeCutFile(t *testing.T) {
	b, err := os.ReadFile(golden.Path(t, "write_small.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cut.pcap")
	if err := os.WriteFile(path, b[:len(b)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd("decode", path)
	if code != 1 || !strings.Contains(stderr, "unexpected EOF") {
		t.Errorf("exit status %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "RoCEv2 packets") {
		t.Errorf("no summary before the error: %q", stdout)
	}
}

// mixedFile returns TestDecodeMixed's capture: three NAKs written by
// wire.PcapWriter, good, with a reserved opcode and with a bad ICRC, then
// an ARP frame.
func mixedFile(t *testing.T) []byte {
	t.Helper()
	env := wire.Envelope{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")}
	ack := func(psn wire.PSN) []byte {
		f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xffff, DestQP: 0x11, PSN: psn}, AETH: wire.AETHFields{Syndrome: wire.NakSyndrome(wire.NakPSNSequenceError), MSN: 3}}
		b := make([]byte, f.Len(0))
		if _, err := f.Encode(b, nil); err != nil {
			t.Fatal(err)
		}
		env.Seal(b)
		return b
	}
	good, reserved, corrupt := ack(1), ack(2), ack(3)
	reserved[0] = 0x15
	corrupt[len(corrupt)-1] ^= 0xff

	var file bytes.Buffer
	w, err := wire.NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	for i, p := range [][]byte{good, reserved, corrupt} {
		if err := w.WritePacket(t0.Add(time.Duration(i)*1500*time.Microsecond), &env, p); err != nil {
			t.Fatal(err)
		}
	}
	// An ARP frame, by hand: record header, then 42 bytes of Ethernet + ARP.
	arp := make([]byte, 42)
	copy(arp[12:], []byte{0x08, 0x06})
	rec := make([]byte, 16)
	rec[8], rec[12] = byte(len(arp)), byte(len(arp))
	copy(rec[0:4], []byte{0x00, 0xf1, 0x53, 0x65}) // 1700000000 little-endian
	file.Write(append(rec, arp...))
	return file.Bytes()
}
