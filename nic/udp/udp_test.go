package udp

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
)

var (
	dstA = netip.MustParseAddrPort("127.0.0.1:4791")
	dstB = netip.MustParseAddrPort("127.0.0.1:4792")
	// Never sent to: splitRuns only looks at the addresses.
	remote4 = netip.MustParseAddrPort("192.0.2.1:4791")
	remote6 = netip.MustParseAddrPort("[2001:db8::1]:4791")
)

// batch builds messages of the given sizes, all to dst unless dsts says
// otherwise for an index.
func batch(sizes []int, dsts map[int]netip.AddrPort) []Message {
	msgs := make([]Message, len(sizes))
	for i, n := range sizes {
		msgs[i] = Message{Buf: make([]byte, n), Addr: dstA}
		if d, ok := dsts[i]; ok {
			msgs[i].Addr = d
		}
	}
	return msgs
}

func repeat(n, size int) []int { return slices.Repeat([]int{size}, n) }

func TestSplitRuns(t *testing.T) {
	gso := gsoLimits{maxSegments: MaxGSOSegments, maxBytes: maxPayloadIPv4}
	tests := []struct {
		name    string
		sizes   []int
		dsts    map[int]netip.AddrPort
		classes map[int]uint8 // Message.TrafficClass, 0 unless given
		lim     gsoLimits
		maxRuns int
		want    []int
	}{
		{name: "empty batch", sizes: nil, lim: gso, want: []int{}},
		{name: "one datagram", sizes: []int{100}, lim: gso, want: []int{1}},
		{name: "gso off", sizes: repeat(3, 100), lim: gsoLimits{maxSegments: 1, maxBytes: maxPayloadIPv4}, want: []int{1, 1, 1}},
		{name: "equal sizes coalesce", sizes: repeat(5, 100), lim: gso, want: []int{5}},
		{name: "shorter last joins and ends the run", sizes: []int{100, 100, 40, 100}, lim: gso, want: []int{3, 1}},
		{name: "longer datagram starts a run", sizes: []int{100, 100, 200, 200}, lim: gso, want: []int{2, 2}},
		{name: "destination change starts a run", sizes: repeat(4, 100), dsts: map[int]netip.AddrPort{2: dstB, 3: dstB}, lim: gso, want: []int{2, 2}},
		{name: "same size, other destination, then back", sizes: repeat(3, 100), dsts: map[int]netip.AddrPort{1: dstB}, lim: gso, want: []int{1, 1, 1}},
		{name: "empty datagram stands alone", sizes: []int{100, 0, 100, 100}, lim: gso, want: []int{1, 1, 2}},
		{name: "empty first datagram", sizes: []int{0, 0}, lim: gso, want: []int{1, 1}},
		{name: "segment limit", sizes: repeat(MaxGSOSegments+6, 10), lim: gso, want: []int{MaxGSOSegments, 6}},
		{name: "byte limit, 4 KiB datagrams over IPv4", sizes: repeat(20, 4096), lim: gso, want: []int{15, 5}},
		{name: "byte limit reached exactly", sizes: []int{1000, 1000, 500}, lim: gsoLimits{maxSegments: 64, maxBytes: 2500}, want: []int{3}},
		{name: "byte limit one short", sizes: []int{1000, 1000, 500}, lim: gsoLimits{maxSegments: 64, maxBytes: 2499}, want: []int{2, 1}},
		{name: "oversized datagram alone", sizes: []int{70000, 70000}, lim: gso, want: []int{1, 1}},
		{name: "IPv4 beyond loopback is never coalesced (the IP ID trap)", sizes: repeat(3, 100), dsts: map[int]netip.AddrPort{0: remote4, 1: remote4, 2: remote4}, lim: gso, want: []int{1, 1, 1}},
		{name: "IPv6 beyond loopback coalesces", sizes: repeat(3, 100), dsts: map[int]netip.AddrPort{0: remote6, 1: remote6, 2: remote6}, lim: gso, want: []int{3}},
		{name: "traffic class change starts a run", sizes: repeat(4, 100), classes: map[int]uint8{2: 0xb8, 3: 0xb8}, lim: gso, want: []int{2, 2}},
		{name: "runs slice full", sizes: repeat(4, 100), dsts: map[int]netip.AddrPort{1: dstB, 3: dstB}, lim: gso, maxRuns: 2, want: []int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := batch(tt.sizes, tt.dsts)
			for i, c := range tt.classes {
				msgs[i].TrafficClass = c
			}
			maxRuns := tt.maxRuns
			if maxRuns == 0 {
				maxRuns = max(len(msgs), 1)
			}
			runs := make([]int, maxRuns)
			n := splitRuns(msgs, tt.lim, runs)
			if got := runs[:n]; !slices.Equal(got, tt.want) {
				t.Fatalf("splitRuns(%v) = %v, want %v", tt.sizes, got, tt.want)
			}
		})
	}
}

func TestSegments(t *testing.T) {
	data := make([]byte, 300)
	for i := range data {
		data[i] = byte(i)
	}
	tests := []struct {
		name    string
		n, seg  int
		stop    int // stop after this many datagrams; 0 = never
		wantLen []int
	}{
		{name: "single datagram", n: 300, seg: 0, wantLen: []int{300}},
		{name: "even split", n: 300, seg: 100, wantLen: []int{100, 100, 100}},
		{name: "short tail", n: 250, seg: 100, wantLen: []int{100, 100, 50}},
		{name: "segment as long as the data", n: 100, seg: 100, wantLen: []int{100}},
		{name: "segment longer than the data", n: 60, seg: 100, wantLen: []int{60}},
		{name: "empty datagram", n: 0, seg: 0, wantLen: []int{0}},
		{name: "caller stops early", n: 300, seg: 100, stop: 2, wantLen: []int{100, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Message{Buf: data, N: tt.n, Segment: tt.seg}
			var got []int
			off := 0
			for d := range Segments(m) {
				if !bytes.Equal(d, data[off:off+len(d)]) {
					t.Fatalf("datagram %d at offset %d differs from the buffer", len(got), off)
				}
				if cap(d) != len(d) {
					t.Fatalf("datagram %d has cap %d > len %d: an append would overwrite the next", len(got), cap(d), len(d))
				}
				off += len(d)
				got = append(got, len(d))
				if len(got) == tt.stop {
					break
				}
			}
			if !slices.Equal(got, tt.wantLen) {
				t.Fatalf("datagram lengths = %v, want %v", got, tt.wantLen)
			}
		})
	}
}

func TestSegmentsDoesNotAllocate(t *testing.T) {
	m := &Message{Buf: make([]byte, 4096), N: 4000, Segment: 1000}
	var total, count int
	allocs := testing.AllocsPerRun(100, func() {
		total, count = 0, 0
		for d := range Segments(m) {
			total += len(d)
			count++
		}
	})
	if allocs != 0 {
		t.Fatalf("ranging over Segments allocates %v times", allocs)
	}
	if total != 4000 || count != 4 {
		t.Fatalf("ranged over %d datagrams, %d bytes, want 4, 4000", count, total)
	}
}

func TestOptionsEnvironment(t *testing.T) {
	tests := []struct {
		name                 string
		env                  map[string]string
		opt                  Options
		wantNoGSO, wantNoGRO bool
	}{
		{name: "defaults", env: map[string]string{EnvNoGSO: "", EnvNoGRO: ""}},
		{name: "env turns GSO off", env: map[string]string{EnvNoGSO: "1", EnvNoGRO: ""}, wantNoGSO: true},
		{name: "env turns GRO off", env: map[string]string{EnvNoGSO: "", EnvNoGRO: "true"}, wantNoGRO: true},
		{name: "env false keeps options", env: map[string]string{EnvNoGSO: "0", EnvNoGRO: "no"}, opt: Options{DisableGRO: true}, wantNoGRO: true},
		{name: "options alone", env: map[string]string{EnvNoGSO: "", EnvNoGRO: ""}, opt: Options{DisableGSO: true}, wantNoGSO: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got := tt.opt.withDefaults()
			if got.DisableGSO != tt.wantNoGSO || got.DisableGRO != tt.wantNoGRO {
				t.Fatalf("DisableGSO, DisableGRO = %v, %v, want %v, %v", got.DisableGSO, got.DisableGRO, tt.wantNoGSO, tt.wantNoGRO)
			}
			if got.RecvBuffer != defaultBuffer || got.SendBuffer != defaultBuffer {
				t.Fatalf("buffers = %d, %d, want %d", got.RecvBuffer, got.SendBuffer, defaultBuffer)
			}
		})
	}
}

func TestFeaturesString(t *testing.T) {
	tests := []struct {
		name string
		f    Features
		want string
	}{
		{name: "all off", f: Features{RecvBuffer: 1, SendBuffer: 2}, want: "gso=off gro=off rcvbuf=1 sndbuf=2"},
		{name: "all on", f: Features{GSO: true, GRO: true, MaxGSOSegments: 64, RecvBuffer: 8, SendBuffer: 9}, want: "gso=on(64) gro=on rcvbuf=8 sndbuf=9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}
