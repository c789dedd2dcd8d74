package udp_test

import (
	"net/netip"
	"testing"

	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/nic/udp/udptest"
)

// BenchmarkRawUDP4KBatched is the baseline of issue 4's throughput targets:
// 4 KiB datagrams, sendmmsg/recvmmsg, no segmentation offload.
func BenchmarkRawUDP4KBatched(b *testing.B) {
	udptest.Throughput(b, udptest.ThroughputConfig{Size: 4096})
}

// BenchmarkRawUDP4KGSO is the same with GSO on send and GRO on receive.
func BenchmarkRawUDP4KGSO(b *testing.B) {
	udptest.Throughput(b, udptest.ThroughputConfig{Size: 4096, GSO: true, GRO: true})
}

// BenchmarkRawUDPPingPong is the latency floor: an 8-byte round trip between
// two net.UDPConn sockets.
func BenchmarkRawUDPPingPong(b *testing.B) {
	udptest.PingPong(b)
}

// BenchmarkRawUDPPingPongPoll is the floor of busy-polled latencies: the
// same round trip with both sides spinning on a recvmmsg that does not
// wait.
func BenchmarkRawUDPPingPongPoll(b *testing.B) {
	udptest.PingPongPoll(b)
}

// BenchmarkTryReadBatchEmpty is one look at an empty socket with a full
// batch of buffers, what a busy-polling device does between datagrams:
// its cost bounds how soon a poller sees a datagram that arrives.
func BenchmarkTryReadBatchEmpty(b *testing.B) {
	c, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msgs := make([]udp.Message, udp.MaxBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 64<<10)
	}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := c.TryReadBatch(msgs); n != 0 || err != nil {
			b.Fatalf("read %d datagrams, %v, from a socket nobody sends to", n, err)
		}
	}
}

// BenchmarkWriteReadSmall is one small operation's datagram (40 bytes:
// a BTH, a RETH, 8 bytes of payload, an ICRC) sent alone by WriteBatch
// and read by TryReadBatch, on one goroutine: the system calls a
// busy-polled round trip makes twice, for its request and its response.
func BenchmarkWriteReadSmall(b *testing.B) {
	tx, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	out := []udp.Message{{Buf: make([]byte, 12+16+8+4), Addr: rx.LocalAddr()}}
	in := []udp.Message{{Buf: make([]byte, 64<<10)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tx.WriteBatch(out); err != nil {
			b.Fatal(err)
		}
		for {
			n, err := rx.TryReadBatch(in)
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				break
			}
		}
	}
}
