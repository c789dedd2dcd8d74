package rping

import (
	"fmt"
	"io"
	"testing"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

func TestRpingData(t *testing.T) {
	tests := []struct {
		ping, size int
		want       string
	}{
		// ../shared/golden/rping.txt: rping -v -S 64 prints these.
		{0, 64, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		{1, 64, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs"},
		{2, 64, "rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst"},
		// The letters run from 'A' to 'z' and start over, and so does
		// the first letter of each ping.
		{57, 26, "rdma-ping-57: zABCDEFGHIJ"},
		{58, 26, "rdma-ping-58: ABCDEFGHIJK"},
		{0, 80, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzABCDEFGH"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d of %d", tt.ping, tt.size), func(t *testing.T) {
			b := make([]byte, tt.size)
			rpingData(b, tt.ping)
			if got := string(cString(b)); got != tt.want || len(got) != tt.size-1 {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestRpingInfoGolden: in rping.pcap the client's SENDs name the buffers
// the server then reads and writes, in rping_rdma_info's layout.
func TestRpingInfoGolden(t *testing.T) {
	r := golden.Reader(t, "rping.pcap")
	var (
		p     wire.Packet
		infos []rpingInfo // from the client's SENDs
		rdma  []rpingInfo // the server's READs and WRITEs
	)
	client := "10.77.0.12"
	for {
		fr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fr.RoCE || p.Decode(fr.Payload) != nil {
			continue
		}
		switch op := p.BTH.OpCode(); {
		case op == wire.OpRCSendOnly && fr.Env.Src.Addr().String() == client:
			if len(p.Payload) != rpingInfoSize {
				t.Fatalf("the client's SEND has %d bytes", len(p.Payload))
			}
			infos = append(infos, parseRpingInfo(p.Payload))
			if got := infos[len(infos)-1].marshal(); string(got) != string(p.Payload) {
				t.Fatalf("% x prints back as % x", p.Payload, got)
			}
		case op == wire.OpRCReadRequest || op == wire.OpRCWriteOnly:
			rdma = append(rdma, rpingInfo{p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()})
		}
	}
	if len(infos) != 6 || len(rdma) != 6 {
		t.Fatalf("%d SENDs from the client and %d READs and WRITEs; want 6 of each (3 pings)", len(infos), len(rdma))
	}
	for i := range infos {
		if infos[i] != rdma[i] {
			t.Errorf("SEND %d names %+v, the server's RDMA operation addresses %+v", i, infos[i], rdma[i])
		}
	}
}
