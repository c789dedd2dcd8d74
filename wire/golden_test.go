package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// The golden tests are in package wire_test, so that they read the rxe
// captures of ../shared/golden (golden.Dir, its README.md describes each
// file, made with ../shared/lab/rxe) through internal/golden, which
// imports wire.

// paddedDir holds captures made with the same lab of what the golden folder
// lacks: messages whose length is not a multiple of 4 (testdata/rxe/README.md).
var paddedDir = filepath.Join("testdata", "rxe")

// goldenCounts is the number of RoCEv2 frames in each capture and how many of
// them carry a bad ICRC, from the table in the golden folder's README.md.
var goldenCounts = map[string]struct{ roce, bad int }{
	"write_small.pcap":         {10, 0},
	"write_large.pcap":         {45, 0},
	"write_imm.pcap":           {28, 0},
	"read_small.pcap":          {10, 0},
	"read_large.pcap":          {45, 0},
	"atomic_fadd.pcap":         {10, 0},
	"atomic_cas.pcap":          {10, 0},
	"send_small.pcap":          {10, 0},
	"send_large.pcap":          {45, 0},
	"write_lat.pcap":           {20, 0},
	"rc_pingpong.pcap":         {20, 0},
	"rping.pcap":               {41, 0},
	"write_large_mtu4096.pcap": {15, 0},
	"host_write.pcap":          {20, 0},
	"host_read.pcap":           {20, 0},
	"host_send.pcap":           {10, 0},
	"host_fadd.pcap":           {10, 0},
	"host_dropack.pcap":        {11, 0},
	"host_badicrc.pcap":        {580, 290}, // every ACK of the host peer corrupted
	// paddedDir
	"write_odd.pcap":      {20, 0},
	"read_odd.pcap":       {20, 0},
	"send_odd.pcap":       {20, 0},
	"send_tiny.pcap":      {10, 0},
	"imm_odd.pcap":        {66, 0},
	"mcast_send_odd.pcap": {2, 0},
}

// hostPeer is the address of the userspace RoCEv2 peer in the host_*
// captures; everything else was sent by rxe.
var hostPeer = netip.MustParseAddr("10.77.0.1")

// goldenFiles returns the paths of the rxe captures: the padded ones kept
// here and the shared golden ones, which are left out with a message when
// the shared folder is absent.
func goldenFiles(t testing.TB) []string {
	t.Helper()
	padded, err := filepath.Glob(filepath.Join(paddedDir, "*.pcap"))
	if err != nil || len(padded) == 0 {
		t.Fatalf("no captures in %s: %v", paddedDir, err)
	}
	shared, err := filepath.Glob(filepath.Join(golden.Dir(), "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(shared) == 0 {
		t.Logf("no golden captures in %s (the shared folder beside the repository): skipping them", golden.Dir())
	}
	return append(padded, shared...)
}

// TestGolden decodes every RoCEv2 frame of every capture, verifies its ICRC
// against the captured IP and UDP headers, and re-encodes it from its fields
// and payload: sealed with the captured envelope, the bytes must be the ones
// rxe (or the host peer) sent.
func TestGolden(t *testing.T) {
	for _, path := range goldenFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := goldenCounts[name]
			if !ok {
				t.Fatalf("no expected counts for %s: add it to goldenCounts from the README", name)
			}
			frames := golden.Frames(t, path)
			if len(frames) != want.roce {
				t.Errorf("%d RoCEv2 frames, README says %d", len(frames), want.roce)
			}
			bad, padded := 0, 0
			var p wire.Packet
			var f wire.Fields
			buf := make([]byte, 16384)
			for _, fr := range frames {
				if err := p.Decode(fr.Payload); err != nil {
					t.Errorf("frame %d: Decode: %v", fr.N, err)
					continue
				}
				n := len(fr.Payload) - wire.ICRCSize
				icrc, err := wire.ICRCFromHeaders(fr.IPUDP, fr.Payload[:n])
				if err != nil {
					t.Fatalf("frame %d: ICRCFromHeaders: %v", fr.N, err)
				}
				if icrc != p.ICRC() {
					bad++
					if p.OpCode() != wire.OpRCAck || fr.Env.Src.Addr() != hostPeer {
						t.Errorf("frame %d: bad ICRC on %v from %v; only the host peer's ACKs are corrupted",
							fr.N, p.OpCode(), fr.Env.Src)
					}
				}

				if p.BTH.PadCount() != 0 {
					padded++
				}
				p.Fields(&f)
				m, err := f.Encode(buf, p.Payload)
				if err != nil {
					t.Fatalf("frame %d: Encode: %v", fr.N, err)
				}
				fr.Env.Seal(buf[:m])
				got := buf[:m]
				if !bytes.Equal(got[:n], fr.Payload[:n]) {
					t.Errorf("frame %d: re-encoded %v differs:\n got %x\nwant %x", fr.N, p.OpCode(), got[:n], fr.Payload[:n])
				}
				if sealed := binary.LittleEndian.Uint32(got[n:]); sealed != icrc {
					t.Errorf("frame %d: Seal wrote %#08x, the ICRC over the captured headers is %#08x", fr.N, sealed, icrc)
				}
				if icrc == p.ICRC() && !bytes.Equal(got, fr.Payload) {
					t.Errorf("frame %d: sealed packet differs from the capture", fr.N)
				}
			}
			if bad != want.bad {
				t.Errorf("%d frames with a bad ICRC, README says %d", bad, want.bad)
			}
			if filepath.Dir(path) == paddedDir && padded == 0 {
				t.Errorf("no padded packet in a capture kept for its padding")
			}
		})
	}
}

// TestGoldenEnvelope checks that the IPv4 header Envelope synthesises is the
// one Linux puts on the wire: given the captured addresses, ports and IP ID
// (rxe's IDs are not 0), Envelope.ICRC equals the ICRC over the real header.
// The host peer's frames also confirm the IPv4 ID trap documented on
// Envelope.
func TestGoldenEnvelope(t *testing.T) {
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			for _, fr := range golden.Frames(t, path) {
				n := len(fr.Payload) - wire.ICRCSize
				want, err := wire.ICRCFromHeaders(fr.IPUDP, fr.Payload[:n])
				if err != nil {
					t.Fatalf("frame %d: %v", fr.N, err)
				}
				if got := fr.Env.ICRC(fr.Payload[:n]); got != want {
					t.Errorf("frame %d: Envelope.ICRC = %#08x, over the captured headers %#08x", fr.N, got, want)
				}
				// The host peer sent from an unconnected UDP socket with
				// DF, the way softnic sends: Linux gave every datagram ID 0.
				if fr.Env.Src.Addr() == hostPeer && fr.Env.IPID != 0 {
					t.Errorf("frame %d: the host peer's datagram has IP ID %#04x, want 0", fr.N, fr.Env.IPID)
				}
			}
		})
	}
}

// TestGoldenFraming checks that PcapWriter frames a packet as Linux does:
// apart from the MAC addresses, the frame built from the captured envelope
// and payload is the captured frame (IPv4 with DF, TTL 64, the ID, header
// checksum, and UDP checksum 0 as rxe sends it). The host peer's datagrams
// left through an ordinary UDP socket, so the host kernel filled in their UDP
// checksum (which the ICRC masks); that field is not compared for them.
func TestGoldenFraming(t *testing.T) {
	const udpChecksum = 14 + 20 + 6 // in the UDP header after Ethernet and IPv4
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			frames := golden.Frames(t, path)
			var capture bytes.Buffer
			w, err := wire.NewPcapWriter(&capture)
			if err != nil {
				t.Fatal(err)
			}
			for _, fr := range frames {
				if err := w.WritePacket(fr.Time, &fr.Env, fr.Payload); err != nil {
					t.Fatalf("frame %d: %v", fr.N, err)
				}
			}
			r, err := wire.NewPcapReader(&capture)
			if err != nil {
				t.Fatal(err)
			}
			for _, fr := range frames {
				written, err := r.Next()
				if err != nil {
					t.Fatalf("frame %d: reading back what PcapWriter wrote: %v", fr.N, err)
				}
				got, want := written.Data, bytes.Clone(fr.Data)
				if fr.Env.Src.Addr() == hostPeer {
					want[udpChecksum], want[udpChecksum+1] = 0, 0
				}
				if !bytes.Equal(got[12:], want[12:]) {
					t.Fatalf("frame %d:\n got %x\nwant %x", fr.N, got[12:], want[12:])
				}
			}
		})
	}
}

// TestRecoverIPIDGolden recovers the IPv4 identification of every frame of
// every rxe capture from its UDP payload alone, as a receiver on a UDP
// socket must: starting from ID 0 (softnic's) or from a wrong guess, it
// finds exactly the captured ID. The only frames it rejects are the ACKs
// host_badicrc.pcap corrupted on purpose.
func TestRecoverIPIDGolden(t *testing.T) {
	recovered, nonZero := 0, 0
	for _, path := range goldenFiles(t) {
		corrupted := filepath.Base(path) == "host_badicrc.pcap"
		for _, fr := range golden.Frames(t, path) {
			captured := fr.Env
			n := len(fr.Payload) - wire.ICRCSize
			icrc, err := wire.ICRCFromHeaders(fr.IPUDP, fr.Payload[:n])
			if err != nil {
				t.Fatal(err)
			}
			good := icrc == binary.LittleEndian.Uint32(fr.Payload[n:])
			for _, guess := range []uint16{0, captured.IPID ^ 0xffff} {
				env := captured
				env.IPID = guess
				id, ok := env.RecoverIPID(fr.Payload)
				switch {
				case good && (!ok || id != captured.IPID):
					t.Errorf("%s frame %d from ID %#04x: RecoverIPID = %#04x, %v; captured ID %#04x",
						filepath.Base(path), fr.N, guess, id, ok, captured.IPID)
				case !good && ok:
					t.Errorf("%s frame %d: a bad ICRC accepted with ID %#04x", filepath.Base(path), fr.N, id)
				case !good && !corrupted:
					t.Errorf("%s frame %d: bad ICRC in a capture with none", filepath.Base(path), fr.N)
				}
			}
			if good {
				recovered++
			}
			if good && captured.IPID != 0 {
				nonZero++
			}
		}
	}
	t.Logf("%d frames recovered, %d of them with a non-zero ID", recovered, nonZero)
	if files, _ := filepath.Glob(filepath.Join(golden.Dir(), "*.pcap")); len(files) > 0 && nonZero < 500 {
		t.Errorf("only %d frames with a non-zero ID: the captures are not rxe's", nonZero)
	}
}

// FuzzDecode feeds arbitrary bytes to Decode. Whatever it accepts must
// re-encode from its Fields and payload to the same bytes, apart from the
// pad bytes and the ICRC, which Fields do not describe and Encode zeroes; and
// the re-encoded packet must decode to the same Fields. Whatever it rejects
// must be rejected with one of its documented errors. The corpus starts with
// every golden packet and a packet of every opcode.
func FuzzDecode(f *testing.F) {
	for _, op := range wire.ValidOpCodes() {
		f.Add(wire.EncodeSample(f, op))
	}
	for _, path := range goldenFiles(f) {
		for _, fr := range golden.Frames(f, path) {
			f.Add(fr.Payload)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := p.Decode(b); err != nil {
			if !wire.IsDecodeError(err) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		var fields wire.Fields
		p.Fields(&fields)
		out := make([]byte, fields.Len(len(p.Payload)))
		n, err := fields.Encode(out, p.Payload)
		if err != nil {
			t.Fatalf("Encode of a decoded packet: %v", err)
		}
		want := bytes.Clone(b)
		clear(want[len(want)-wire.ICRCSize-int(p.BTH.PadCount()):])
		if !bytes.Equal(out[:n], want) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", out[:n], want)
		}
		var q wire.Packet
		if err := q.Decode(out[:n]); err != nil {
			t.Fatalf("decode of the re-encoded packet: %v", err)
		}
		var again wire.Fields
		q.Fields(&again)
		if again != fields {
			t.Fatalf("fields changed:\n%+v\n%+v", fields, again)
		}
	})
}

// TestPcapngTshark: golden captures converted to pcapng by tshark (-F
// pcapng, its default format) read as the same frames: the CM and RC
// traffic of rping, the 580 frames of host_badicrc with their bad ICRCs,
// and the READs of read_large. (Three of them: tshark takes most of a
// second to start.)
func TestPcapngTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH; install Debian's tshark to run this test")
	}
	for _, name := range []string{"rping.pcap", "host_badicrc.pcap", "read_large.pcap"} {
		path := golden.Path(t, name)
		t.Run(name, func(t *testing.T) {
			ng := filepath.Join(t.TempDir(), "capture.pcapng")
			if out, err := exec.Command(tshark, "-r", path, "-F", "pcapng", "-w", ng).CombinedOutput(); err != nil {
				t.Fatalf("tshark: %v\n%s", err, out)
			}
			if b, err := os.ReadFile(ng); err != nil || len(b) < 4 || binary.LittleEndian.Uint32(b) != 0x0a0d0d0a { // a section header block
				t.Fatalf("tshark did not write pcapng: %v %.4x", err, b)
			}
			want, got := golden.Open(t, path), golden.Open(t, ng)
			for i := 1; ; i++ {
				w, werr := want.Next()
				g, gerr := got.Next()
				if werr != nil || gerr != nil {
					if !errors.Is(werr, io.EOF) || !errors.Is(gerr, io.EOF) {
						t.Fatalf("frame %d: from pcap %v, from pcapng %v; want both to end together", i, werr, gerr)
					}
					break
				}
				if !g.Time.Equal(w.Time) || !bytes.Equal(g.Data, w.Data) || g.RoCE != w.RoCE || g.Env != w.Env ||
					!bytes.Equal(g.Payload, w.Payload) || g.ICRC != w.ICRC {
					t.Errorf("frame %d differs:\npcapng %+v\npcap   %+v", i, g, w)
				}
			}
		})
	}
}

// TestGoldenMulticast: what rxe puts on the wire for a datagram to a
// multicast group (rdma_cm's mckey in a guest of the lab, which softnic's
// UD requester sends alike): an IPv4 datagram to the group with DF, TTL 64
// and DSCP 0, UDP port 4791 with checksum 0, a BTH with the multicast QPN
// 0xFFFFFF, the default P_Key and no AckReq (nothing acknowledges a
// datagram), PSNs counting up from 0, and a DETH with rdma_cm's Q_Key
// (RDMA_UDP_QKEY) and the sending QP. The file is checked too by TestGolden
// (ICRC, re-encoding) and TestGoldenFraming (the IPv4 and UDP headers).
func TestGoldenMulticast(t *testing.T) {
	group := netip.MustParseAddrPort("239.1.2.5:4791")
	frames := golden.Frames(t, filepath.Join(paddedDir, "mcast_send_odd.pcap"))
	if len(frames) != 2 {
		t.Fatalf("%d RoCEv2 frames, want mckey's 2", len(frames))
	}
	var p wire.Packet
	for i, fr := range frames {
		ip := fr.IPUDP
		if fr.Env.Dst != group || ip[1] != 0 || ip[6]&0x40 == 0 || ip[8] != 64 || binary.BigEndian.Uint16(ip[26:]) != 0 {
			t.Errorf("frame %d: to %v, TOS %#x, flags %#x, TTL %d, UDP checksum %#04x; want to %v, TOS 0, DF, TTL 64, checksum 0",
				fr.N, fr.Env.Dst, ip[1], ip[6], ip[8], binary.BigEndian.Uint16(ip[26:]), group)
		}
		if err := p.Decode(fr.Payload); err != nil {
			t.Fatalf("frame %d: %v", fr.N, err)
		}
		var f wire.Fields
		p.Fields(&f)
		want := wire.Fields{
			BTH:  wire.BTHFields{OpCode: wire.OpUDSendOnlyImm, PadCount: 3, PKey: 0xffff, DestQP: wire.MulticastQPN, PSN: wire.PSN(i)},
			DETH: wire.DETHFields{QKey: 0x01234567, SrcQP: 0x14}, // g2's fourth QP since it booted
		}
		if f.BTH != want.BTH || f.DETH != want.DETH {
			t.Errorf("frame %d: %+v %+v, want %+v %+v", fr.N, f.BTH, f.DETH, want.BTH, want.DETH)
		}
	}
}
