package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// goldenDir holds captures of Linux Soft-RoCE (rdma_rxe, kernel 6.1) made
// with ../shared/lab/rxe; its README.md describes each file.
var goldenDir = filepath.Join("..", "..", "shared", "golden")

// paddedDir holds captures made with the same lab of what goldenDir lacks:
// messages whose length is not a multiple of 4 (testdata/rxe/README.md).
var paddedDir = filepath.Join("testdata", "rxe")

// goldenCounts is the number of RoCEv2 frames in each capture and how many of
// them carry a bad ICRC, from the table in goldenDir/README.md.
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
	"write_odd.pcap": {20, 0},
	"read_odd.pcap":  {20, 0},
	"send_odd.pcap":  {20, 0},
	"send_tiny.pcap": {10, 0},
	"imm_odd.pcap":   {66, 0},
}

// hostPeer is the address of the userspace RoCEv2 peer in the host_*
// captures; everything else was sent by rxe.
var hostPeer = netip.MustParseAddr("10.77.0.1")

// goldenFrame is a RoCEv2 frame copied out of a capture.
type goldenFrame struct {
	n       int // frame number in the file, from 1
	data    []byte
	env     Envelope
	ipudp   []byte
	payload []byte
}

// goldenFiles returns the paths of the rxe captures: the padded ones kept
// here and the shared golden ones, which are left out with a message when
// the shared folder is absent.
func goldenFiles(t testing.TB) []string {
	t.Helper()
	padded, err := filepath.Glob(filepath.Join(paddedDir, "*.pcap"))
	if err != nil || len(padded) == 0 {
		t.Fatalf("no captures in %s: %v", paddedDir, err)
	}
	shared, err := filepath.Glob(filepath.Join(goldenDir, "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(shared) == 0 {
		t.Logf("no golden captures in %s (the shared folder beside the repository): skipping them", goldenDir)
	}
	return append(padded, shared...)
}

// readGolden returns the RoCEv2 frames of a capture.
func readGolden(t testing.TB, path string) []goldenFrame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var frames []goldenFrame
	for n := 1; ; n++ {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		if fr.RoCE {
			frames = append(frames, goldenFrame{
				n:       n,
				data:    bytes.Clone(fr.Data),
				env:     fr.Env,
				ipudp:   bytes.Clone(fr.IPUDP),
				payload: bytes.Clone(fr.Payload),
			})
		}
	}
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
			frames := readGolden(t, path)
			if len(frames) != want.roce {
				t.Errorf("%d RoCEv2 frames, README says %d", len(frames), want.roce)
			}
			bad, padded := 0, 0
			var p Packet
			var f Fields
			buf := make([]byte, 16384)
			for _, fr := range frames {
				if err := p.Decode(fr.payload); err != nil {
					t.Errorf("frame %d: Decode: %v", fr.n, err)
					continue
				}
				n := len(fr.payload) - ICRCSize
				icrc, err := ICRCFromHeaders(fr.ipudp, fr.payload[:n])
				if err != nil {
					t.Fatalf("frame %d: ICRCFromHeaders: %v", fr.n, err)
				}
				if icrc != p.ICRC() {
					bad++
					if p.OpCode() != OpRCAck || fr.env.Src.Addr() != hostPeer {
						t.Errorf("frame %d: bad ICRC on %v from %v; only the host peer's ACKs are corrupted",
							fr.n, p.OpCode(), fr.env.Src)
					}
				}

				if p.BTH.PadCount() != 0 {
					padded++
				}
				p.Fields(&f)
				m, err := f.Encode(buf, p.Payload)
				if err != nil {
					t.Fatalf("frame %d: Encode: %v", fr.n, err)
				}
				fr.env.Seal(buf[:m])
				got := buf[:m]
				if !bytes.Equal(got[:n], fr.payload[:n]) {
					t.Errorf("frame %d: re-encoded %v differs:\n got %x\nwant %x", fr.n, p.OpCode(), got[:n], fr.payload[:n])
				}
				if sealed := binary.LittleEndian.Uint32(got[n:]); sealed != icrc {
					t.Errorf("frame %d: Seal wrote %#08x, the ICRC over the captured headers is %#08x", fr.n, sealed, icrc)
				}
				if icrc == p.ICRC() && !bytes.Equal(got, fr.payload) {
					t.Errorf("frame %d: sealed packet differs from the capture", fr.n)
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
			for _, fr := range readGolden(t, path) {
				n := len(fr.payload) - ICRCSize
				want, err := ICRCFromHeaders(fr.ipudp, fr.payload[:n])
				if err != nil {
					t.Fatalf("frame %d: %v", fr.n, err)
				}
				if got := fr.env.ICRC(fr.payload[:n]); got != want {
					t.Errorf("frame %d: Envelope.ICRC = %#08x, over the captured headers %#08x", fr.n, got, want)
				}
				// The host peer sent from an unconnected UDP socket with
				// DF, the way softnic sends: Linux gave every datagram ID 0.
				if fr.env.Src.Addr() == hostPeer && fr.env.IPID != 0 {
					t.Errorf("frame %d: the host peer's datagram has IP ID %#04x, want 0", fr.n, fr.env.IPID)
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
	const udpChecksum = ethHeaderSize + ipv4HeaderSize + 6
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			for _, fr := range readGolden(t, path) {
				got := appendFrame(nil, &fr.env, fr.payload)
				want := bytes.Clone(fr.data)
				if fr.env.Src.Addr() == hostPeer {
					want[udpChecksum], want[udpChecksum+1] = 0, 0
				}
				if !bytes.Equal(got[12:], want[12:]) {
					t.Fatalf("frame %d:\n got %x\nwant %x", fr.n, got[12:], want[12:])
				}
			}
		})
	}
}
