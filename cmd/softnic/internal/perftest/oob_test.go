package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

func TestKeyRecord(t *testing.T) {
	tests := []struct {
		name string
		rec  keyRecord
		text string // the 108 bytes up to the NUL padding
	}{
		{
			// The example of ../shared/lab/rxe/README.md.
			name: "rxe",
			rec: keyRecord{OutReads: 1, QPN: 0x44, PSN: 0xb800a1, RKey: 0x3bfa, VAddr: 0x56347b07c000,
				GID: wire.GIDFromAddr(netip.MustParseAddr("10.77.0.12"))},
			text: "0000:0001:000044:b800a1:00003bfa:000056347b07c000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:",
		},
		{
			name: "zero",
			text: "0000:0000:000000:000000:00000000:0000000000000000:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00000000:",
		},
		{
			name: "largest",
			rec: keyRecord{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: 1<<64 - 1,
				GID: wire.GIDFromAddr(netip.MustParseAddr("fe80::5054:ff:fe77:c")), SRQN: 0xffffffff},
			text: "ffff:ffff:ffffff:ffffff:ffffffff:ffffffffffffffff:fe:80:00:00:00:00:00:00:50:54:00:ff:fe:77:00:0c:ffffffff:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.rec.marshal()
			want := append([]byte(tt.text), make([]byte, oobKeySize-len(tt.text))...)
			if !bytes.Equal(b, want) {
				t.Fatalf("marshal:\n got %q\nwant %q", b, want)
			}
			got, err := parseKeyRecord(b)
			if err != nil || got != tt.rec {
				t.Fatalf("parse: %+v, %v; want %+v", got, err, tt.rec)
			}
		})
	}
}

func TestParseKeyRecordErrors(t *testing.T) {
	good := (&keyRecord{QPN: 0x11}).marshal()
	replace := func(old, new string) []byte {
		b := bytes.Replace(good, []byte(old), []byte(new), 1)
		return append(b, make([]byte, max(oobKeySize-len(b), 0))...)[:oobKeySize]
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:oobKeySize-1], "key record of 107 bytes"},
		{"no NUL", bytes.Repeat([]byte("0"), oobKeySize), "without a NUL"},
		{"missing field", replace("00000000:\x00", "\x00"), "has 22 fields"},
		{"QPN beyond 24 bits", replace("0000:0000:000011", "000:0000:1000011"), "field 3"},
		{"not hexadecimal", replace("0000:0000:000011", "0000:00g0:000011"), "field 2"},
		{"empty field", replace("0000:0000:", "0000::"), "field 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseKeyRecord(tt.b)
			if !errors.Is(err, errOOB) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want errOOB saying %q", err, tt.want)
			}
		})
	}
}

// FuzzParseKeyRecord: a key record comes from the network. Parsing never
// panics, and what parses prints back to a record that parses the same.
func FuzzParseKeyRecord(f *testing.F) {
	f.Add((&keyRecord{QPN: 0x11, PSN: 0x123456, VAddr: 0x7f0000000000}).marshal())
	f.Add([]byte("1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14:15:16:17\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != oobKeySize {
			b = append(b, make([]byte, oobKeySize)...)[:oobKeySize]
		}
		k, err := parseKeyRecord(b)
		if err != nil {
			return
		}
		again, err := parseKeyRecord(k.marshal())
		if err != nil || again != k {
			t.Fatalf("%q parsed to %+v, which prints to a record that parses to %+v, %v", b, k, again, err)
		}
	})
}

// oobMessages returns the TCP payloads of perftest's exchange in a golden
// capture, in order, each with whether the client (10.77.0.12, g2) sent
// it. Each message travels in a segment of its own there.
func oobMessages(t *testing.T, name string) (msgs [][]byte, fromClient []bool) {
	t.Helper()
	r := golden.Reader(t, name)
	client := netip.MustParseAddr("10.77.0.12")
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return msgs, fromClient
		}
		if err != nil {
			t.Fatal(err)
		}
		src, payload, ok := tcpPayload(fr.Data, DefaultOOBPort)
		if ok && len(payload) > 0 {
			msgs = append(msgs, bytes.Clone(payload))
			fromClient = append(fromClient, src == client)
		}
	}
}

// tcpPayload returns the source address and payload of an Ethernet frame
// carrying IPv4 TCP from or to port.
func tcpPayload(frame []byte, port uint16) (netip.Addr, []byte, bool) {
	const eth, ipProtoTCP = 14, 6
	if len(frame) < eth+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return netip.Addr{}, nil, false
	}
	ip := frame[eth:]
	ihl, total := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
	if ip[9] != ipProtoTCP || total > len(ip) || total < ihl+20 {
		return netip.Addr{}, nil, false
	}
	tcp := ip[ihl:total]
	if binary.BigEndian.Uint16(tcp) != port && binary.BigEndian.Uint16(tcp[2:]) != port {
		return netip.Addr{}, nil, false
	}
	off := int(tcp[12]>>4) * 4
	if off > len(tcp) {
		return netip.Addr{}, nil, false
	}
	return netip.AddrFrom4([4]byte(ip[12:16])), tcp[off:], true
}

// TestOOBGolden checks softnic's model of perftest's exchange against
// perftest's own (bookworm's 4.5-0.17) in the golden captures: the sizes
// and order of the messages each test sends, key records that parse to
// what perftest printed and print back byte for byte, the version, the
// system values and the MTU.
func TestOOBGolden(t *testing.T) {
	tests := []struct {
		file   string
		test   Test
		mtu    byte
		client keyRecord // what the .txt log shows of the client's "local address"
	}{
		{"write_large.pcap", WriteBW, '3', keyRecord{QPN: 0x60, PSN: 0xebce4a, RKey: 0x6375, VAddr: 0x55c1882d0000}},
		{"read_large.pcap", ReadBW, '3', keyRecord{OutReads: 0x80, QPN: 0x64, PSN: 0x483ed2, RKey: 0x67a4, VAddr: 0x557c17d35000}},
		{"atomic_fadd.pcap", AtomicBW, '3', keyRecord{QPN: 0x65, PSN: 0x657a9c}},
		{"send_small.pcap", SendBW, '3', keyRecord{QPN: 0x67, PSN: 0x45df52}},
		{"write_lat.pcap", WriteLat, '3', keyRecord{QPN: 0x69, PSN: 0x34bb58, RKey: 0x6cba, VAddr: 0x558c75d29000}},
		{"write_large_mtu4096.pcap", WriteBW, '5', keyRecord{QPN: 0x11, PSN: 0x9c1a33, RKey: 0x2e4, VAddr: 0x5596c12c8000}},
		{"host_write.pcap", WriteBW, '3', keyRecord{QPN: 0x6c, PSN: 0x8df946, RKey: 0x72e7, VAddr: 0x5646e7c37000}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			msgs, fromClient := oobMessages(t, tt.file)
			// The sizes the client sends, in softnic's model of the test.
			want := []int{oobVersionSize, oobWordSize, oobWordSize, oobMTUSize}
			for range 1 + tt.test.barriersBefore() {
				want = append(want, oobKeySize)
			}
			if tt.test.reportsResults() {
				want = append(want, oobKeySize)
				for range oobResultFields {
					want = append(want, oobResultSize)
				}
			}
			if tt.test.isBW() {
				want = append(want, oobKeySize, len(oobDone))
			}
			var got []int
			for i, m := range msgs {
				if fromClient[i] {
					got = append(got, len(m))
				}
			}
			if !slicesEqual(got, want) {
				t.Fatalf("the client sends messages of %v bytes, softnic's model %v", got, want)
			}
			var sawClientKeys bool
			for i, m := range msgs {
				switch {
				case len(m) == oobKeySize:
					k, err := parseKeyRecord(m)
					if err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
					if p := k.marshal(); !bytes.Equal(p, m) {
						t.Fatalf("message %d prints back as\n%q, perftest sent\n%q", i, p, m)
					}
					if fromClient[i] && !sawClientKeys {
						sawClientKeys = true
						// perftest prints the rkey and address for WRITE
						// and READ, the outstanding reads for READ.
						shown := keyRecord{QPN: k.QPN, PSN: k.PSN, GID: k.GID}
						switch tt.test {
						case ReadBW:
							shown.OutReads = k.OutReads
							fallthrough
						case WriteBW, WriteLat:
							shown.RKey, shown.VAddr = k.RKey, k.VAddr
						}
						w := tt.client
						w.GID = wire.GIDFromAddr(netip.MustParseAddr("10.77.0.12"))
						if shown != w {
							t.Fatalf("the client's key record shows %+v, its log %+v", shown, w)
						}
					}
				case len(m) == oobVersionSize:
					if v, err := parseVersion(m); err != nil || v != 6.06 {
						t.Fatalf("version %q: %v, %v", m, v, err)
					}
				case len(m) == oobMTUSize:
					if m[0] != tt.mtu || m[1] != 0 {
						t.Fatalf("MTU %q, want %q", m, []byte{tt.mtu, 0})
					}
				}
			}
			if string(msgs[2]) != "\x00\x00\x10\x00" || string(msgs[4]) != "\x00\x00\x00\x40" {
				t.Fatalf("cycle buffer %q, cache line %q: want 4096 and 64", msgs[2], msgs[4])
			}
		})
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOOBOpen runs the opening of the exchange against a scripted peer.
func TestOOBOpen(t *testing.T) {
	word := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	version := func(s string) []byte { return append([]byte(s), make([]byte, oobVersionSize-len(s))...) }
	tests := []struct {
		name   string
		client bool
		peer   [][]byte // the peer's version, cycle buffer, cache line, MTU
		mine   wire.MTU
		want   oobParams
		err    string
	}{
		{"server takes the larger and the smaller", false,
			[][]byte{version("6.06"), word(8192), word(128), []byte("3\x00")}, wire.MTU4096,
			oobParams{6.06, 8192, 128, wire.MTU1024}, ""},
		{"client keeps its own", true,
			[][]byte{version("5.70"), word(1024), word(32), []byte("5\x00")}, wire.MTU1024,
			oobParams{5.70, defaultCycleBuffer, defaultCacheLine, wire.MTU1024}, ""},
		{"old perftest", false, [][]byte{version("5.1")}, wire.MTU1024, oobParams{}, "softnic speaks the exchange of 5.33 and later"},
		{"no version", false, [][]byte{version("")}, wire.MTU1024, oobParams{}, `version ""`},
		{"odd cycle buffer", false, [][]byte{version("6.06"), word(3000)}, wire.MTU1024, oobParams{}, "3000 is not a power of two"},
		{"MTU 9", true, [][]byte{version("6.06"), word(4096), word(64), []byte("9\x00")}, wire.MTU1024, oobParams{}, `MTU "9\x00"`},
		{"MTU without NUL", true, [][]byte{version("6.06"), word(4096), word(64), []byte("33")}, wire.MTU1024, oobParams{}, `MTU "33"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mine, theirs := net.Pipe()
			defer mine.Close()
			sent := make(chan [][]byte, 1)
			go func() {
				defer theirs.Close()
				var got [][]byte
				defer func() { sent <- got }()
				for _, m := range tt.peer {
					b := make([]byte, len(m))
					if tt.client {
						if _, err := io.ReadFull(theirs, b); err != nil {
							return
						}
						got = append(got, b)
					}
					if _, err := theirs.Write(m); err != nil {
						return
					}
					if !tt.client {
						if _, err := io.ReadFull(theirs, b); err != nil {
							return
						}
						got = append(got, b)
					}
				}
			}()
			o := &oobConn{conn: mine, client: tt.client}
			p, err := o.open(tt.mine)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %+v, %v; want an error saying %q", p, err, tt.err)
				}
				return
			}
			if err != nil || p != tt.want {
				t.Fatalf("got %+v, %v; want %+v", p, err, tt.want)
			}
			mine.Close()
			got := <-sent
			wantSent := []string{"6.06" + strings.Repeat("\x00", 12), "\x00\x00\x10\x00", "\x00\x00\x00\x40", string([]byte{'0' + byte(tt.mine), 0})}
			for i, m := range got {
				if string(m) != wantSent[i] {
					t.Errorf("message %d: sent %q, want %q", i, m, wantSent[i])
				}
			}
		})
	}
}

// TestOOBReports: a report goes out as five big-endian words, one per
// exchange, and comes back as the peer's.
func TestOOBReports(t *testing.T) {
	mine, theirs := net.Pipe()
	defer mine.Close()
	peer := bwReport{Size: 64, Iters: 5, PeakMBs: 7.05, AvgMBs: 3.5, MsgRate: 0.000902}
	var got []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer theirs.Close()
		for _, f := range peer.fields() {
			b := make([]byte, oobResultSize)
			if _, err := io.ReadFull(theirs, b); err != nil {
				return
			}
			got = append(got, b...)
			theirs.Write(binary.BigEndian.AppendUint64(nil, f))
		}
	}()
	o := &oobConn{conn: mine, client: true}
	mineRep := bwReport{Size: 8192, Iters: 100, PeakMBs: 12.5, AvgMBs: 11.75, MsgRate: 0.0015}
	rep, err := o.exchangeReports(&mineRep)
	<-done
	if err != nil || rep != peer {
		t.Fatalf("got %+v, %v; want %+v", rep, err, peer)
	}
	want := []byte{0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 100, 0x40, 0x29, 0, 0, 0, 0, 0, 0}
	if !bytes.HasPrefix(got, want) || len(got) != oobResultFields*oobResultSize {
		t.Fatalf("sent % x, want it to start with % x (8192, 100, 12.5)", got, want)
	}
}
