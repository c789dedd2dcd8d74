package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tsharkFields are the fields TestTshark asks tshark for, in column order.
var tsharkFields = []string{
	"frame.number",
	"infiniband.bth.opcode",
	"infiniband.bth.se",
	"infiniband.bth.padcnt",
	"infiniband.bth.p_key",
	"infiniband.bth.destqp",
	"infiniband.bth.a",
	"infiniband.bth.psn",
	"infiniband.reth.va", // also the AtomicETH's VA
	"infiniband.reth.r_key",
	"infiniband.reth.dmalen",
	"infiniband.atomiceth.swapdt",
	"infiniband.atomiceth.cmpdt",
	"infiniband.aeth.syndrome",
	"infiniband.aeth.msn",
	"infiniband.atomicacketh.origremdt",
	"infiniband.immdt",
	"infiniband.ieth",
	"infiniband.deth.q_key",
	"infiniband.deth.srcqp",
	"infiniband.invariant.crc",
	"data.len",
	"ip.checksum.status",
	"udp.checksum.status",
	"infiniband.vendor",
	"_ws.col.Info",
	"_ws.malformed",
	"_ws.expert.severity",
}

// TestTshark writes a pcap of every opcode over IPv4 and IPv6 and has
// Wireshark's dissector read it back: no malformed packets, no expert
// warnings, valid IP and UDP checksums, and every header field tshark shows
// equal to what was encoded. It runs when tshark is installed (.ci/run
// installs Debian's).
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH; install Debian's tshark to run this test")
	}
	envs := []Envelope{
		{Src: netip.MustParseAddrPort("127.0.0.1:49152"), Dst: netip.MustParseAddrPort("127.0.0.2:4791")},
		{Src: netip.MustParseAddrPort("[::1]:49153"), Dst: netip.MustParseAddrPort("[::1]:4791")},
	}
	var (
		file bytes.Buffer
		want []Fields
		lens []int    // payload lengths
		pkts [][]byte // the sealed packets
	)
	w, err := NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, env := range envs {
		for i, op := range validOpCodes() {
			f := sampleFields(op)
			// Distinct values per packet, so that a shifted row shows.
			f.BTH.DestQP += uint32(len(want))
			f.BTH.PSN = f.BTH.PSN.Add(uint32(len(want)))
			f.RETH.RKey += uint32(i)
			f.AETH = AETHFields{Syndrome: []Syndrome{ACKSyndrome(CreditInvalid), RNRNakSyndrome(14), NakSyndrome(NakRemoteAccessError)}[i%3], MSN: uint32(i)}
			payload := samplePayload(samplePayloadLen(op) + i%4)
			if op.IsFirst() || op.IsMiddle() || op.IsAtomicWrite() || !op.HasPayload() {
				payload = payload[:samplePayloadLen(op)]
			}
			buf := make([]byte, f.Len(len(payload)))
			n, err := f.Encode(buf, payload)
			if err != nil {
				t.Fatal(err)
			}
			env.Seal(buf[:n])
			if err := w.WritePacket(ts.Add(time.Duration(len(want))*time.Millisecond), &env, buf[:n]); err != nil {
				t.Fatal(err)
			}
			f.BTH.PadCount = uint8(padLen(len(payload)))
			want = append(want, f)
			lens = append(lens, len(payload))
			pkts = append(pkts, buf[:n])
		}
	}
	path := filepath.Join(t.TempDir(), "every-opcode.pcap")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-n", "-r", path,
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-T", "fields", "-E", "separator=/t", "-E", "aggregator=,"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("tshark printed %d lines for %d packets:\n%s", len(lines), len(want), out)
	}
	for i, line := range lines {
		col := map[string]string{}
		for j, v := range strings.Split(line, "\t") {
			col[tsharkFields[j]] = v
		}
		f := want[i]
		op := f.BTH.OpCode
		family := "IPv4"
		if i >= len(want)/len(envs) {
			family = "IPv6"
		}
		t.Run(fmt.Sprintf("%s/%v", family, op), func(t *testing.T) {
			if col["_ws.malformed"] != "" || col["_ws.expert.severity"] != "" {
				t.Errorf("tshark reports malformed %q, expert severity %q", col["_ws.malformed"], col["_ws.expert.severity"])
			}
			if family == "IPv4" {
				expectField(t, col, "ip.checksum.status", 1) // 1: good
			} else {
				expectField(t, col, "udp.checksum.status", 1)
			}
			expectField(t, col, "infiniband.bth.opcode", uint64(op))
			expectField(t, col, "infiniband.bth.se", boolValue(f.BTH.SE))
			expectField(t, col, "infiniband.bth.padcnt", uint64(f.BTH.PadCount))
			expectField(t, col, "infiniband.bth.p_key", uint64(f.BTH.PKey))
			expectField(t, col, "infiniband.bth.destqp", uint64(f.BTH.DestQP))
			expectField(t, col, "infiniband.bth.a", boolValue(f.BTH.AckReq))
			expectField(t, col, "infiniband.bth.psn", uint64(f.BTH.PSN))
			name, _, _ := strings.Cut(col["_ws.col.Info"], "QP=")
			if name = strings.TrimSpace(name); name == "Unknown OpCode" {
				// Wireshark 4.0 has no FLUSH or ATOMIC WRITE: it shows the
				// bytes after the BTH as one block, which must be ours.
				if !op.IsFlush() && !op.IsAtomicWrite() {
					t.Errorf("tshark does not know %v", op)
				}
				expectHex(t, col, "infiniband.vendor", pkts[i][BTHSize:])
				return
			}
			if name != op.String() {
				t.Errorf("tshark names the opcode %q, String() says %q", name, op.String())
			}
			icrc := pkts[i][len(pkts[i])-ICRCSize:]
			expectField(t, col, "infiniband.invariant.crc", uint64(binary.BigEndian.Uint32(icrc))) // tshark reads it big-endian
			if op.HasRETH() {
				expectField(t, col, "infiniband.reth.va", f.RETH.VA)
				expectField(t, col, "infiniband.reth.r_key", uint64(f.RETH.RKey))
				expectField(t, col, "infiniband.reth.dmalen", uint64(f.RETH.DMALen))
			}
			if op.HasAtomicETH() {
				expectField(t, col, "infiniband.reth.va", f.AtomicETH.VA)
				expectField(t, col, "infiniband.reth.r_key", uint64(f.AtomicETH.RKey))
				expectField(t, col, "infiniband.atomiceth.swapdt", f.AtomicETH.SwapAdd)
				expectField(t, col, "infiniband.atomiceth.cmpdt", f.AtomicETH.Compare)
			}
			if op.HasAETH() {
				expectField(t, col, "infiniband.aeth.syndrome", uint64(f.AETH.Syndrome))
				expectField(t, col, "infiniband.aeth.msn", uint64(f.AETH.MSN))
			}
			if op.HasAtomicAckETH() {
				expectField(t, col, "infiniband.atomicacketh.origremdt", f.AtomicAckETH.OrigData)
			}
			if op.HasImmDT() {
				expectBytes(t, col, "infiniband.immdt", uint64(f.ImmDT))
			}
			if op.HasIETH() {
				expectBytes(t, col, "infiniband.ieth", uint64(f.IETH))
			}
			if op.HasDETH() {
				expectField(t, col, "infiniband.deth.q_key", uint64(f.DETH.QKey))
				expectField(t, col, "infiniband.deth.srcqp", uint64(f.DETH.SrcQP))
			}
			// Wireshark hands payload and pad to its data dissector.
			if n := lens[i] + int(f.BTH.PadCount); n > 0 {
				expectField(t, col, "data.len", uint64(n))
			} else if col["data.len"] != "" {
				t.Errorf("tshark shows %s bytes of data on an empty packet", col["data.len"])
			}
		})
	}
}

// expectField checks that the first occurrence of field holds the number
// want.
func expectField(t *testing.T, col map[string]string, field string, want uint64) {
	t.Helper()
	first, _, _ := strings.Cut(col[field], ",")
	got, err := strconv.ParseUint(first, 0, 64)
	if err != nil || got != want {
		t.Errorf("%s = %q, want %d (%#x)", field, col[field], want, want)
	}
}

// expectBytes checks a byte-string field (shown as hex digits) against the
// big-endian value want.
func expectBytes(t *testing.T, col map[string]string, field string, want uint64) {
	t.Helper()
	first, _, _ := strings.Cut(col[field], ",") // tshark 4.0 shows ImmDt twice
	b, err := hex.DecodeString(strings.ReplaceAll(first, ":", ""))
	if err != nil || len(b) != 4 || uint64(binary.BigEndian.Uint32(b)) != want {
		t.Errorf("%s = %q, want %08x", field, col[field], want)
	}
}

// expectHex checks the last occurrence of a byte-string field against want
// (tshark 4.0 adds the unknown-header block twice: its first 4 bytes, then
// all of it).
func expectHex(t *testing.T, col map[string]string, field string, want []byte) {
	t.Helper()
	all := strings.Split(col[field], ",")
	if got := all[len(all)-1]; got != hex.EncodeToString(want) {
		t.Errorf("%s = %q, want %x", field, col[field], want)
	}
}

func boolValue(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
