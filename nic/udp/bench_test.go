package udp_test

import (
	"testing"

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
