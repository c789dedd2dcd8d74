package ladder

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/internal/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/*.ladder from the golden captures")

// readCapture draws every RoCEv2 packet of a capture.
func readCapture(t testing.TB, path string, o Options) *Ladder {
	t.Helper()
	l := New(o)
	for _, p := range capturePackets(t, path) {
		l.Add(&p)
	}
	return l
}

// capturePackets returns the RoCEv2 packets of a capture.
func capturePackets(t testing.TB, path string) []Packet {
	t.Helper()
	var ps []Packet
	for _, fr := range golden.Frames(t, path) {
		ps = append(ps, Packet{Time: fr.Time, Env: fr.Env, Data: fr.Payload, ICRC: fr.ICRC})
	}
	return ps
}

// want is what a capture's ladder must name: the anomalies by kind (and
// retransmissions by cause), and some of them exactly.
type want struct {
	conversations int
	kinds         map[Kind]int
	causes        map[Cause]int
	named         []Anomaly // each must be named, Text aside
}

// goldenLadders holds, for every golden capture, what its README says
// happened (../shared/golden/README.md and the NAME.txt beside each).
var goldenLadders = map[string]want{
	"atomic_cas.pcap":          {conversations: 1},
	"atomic_fadd.pcap":         {conversations: 1},
	"host_fadd.pcap":           {conversations: 1},
	"host_read.pcap":           {conversations: 1},
	"host_send.pcap":           {conversations: 1},
	"host_write.pcap":          {conversations: 1},
	"rc_pingpong.pcap":         {conversations: 1},
	"read_large.pcap":          {conversations: 1},
	"read_small.pcap":          {conversations: 1},
	"rping.pcap":               {conversations: 2}, // the CM's QP1 and the RC QPs
	"send_large.pcap":          {conversations: 1},
	"send_small.pcap":          {conversations: 1},
	"write_imm.pcap":           {conversations: 1},
	"write_large.pcap":         {conversations: 1},
	"write_large_mtu4096.pcap": {conversations: 1},
	"write_lat.pcap":           {conversations: 1},
	"write_small.pcap":         {conversations: 1},
	// "the host withholds the 5th ACK; rxe retransmits WRITE PSN n+4 after
	// ~64 ms ..., the host re-ACKs the duplicate"
	"host_dropack.pcap": {
		conversations: 1,
		kinds:         map[Kind]int{Retransmission: 1, Duplicate: 1},
		causes:        map[Cause]int{CauseTimeout: 1},
		named: []Anomaly{
			{Kind: Retransmission, Cause: CauseTimeout, Seq: 10, PSN: 0x11d870},
			{Kind: Duplicate, Seq: 10, PSN: 0x11d870},
		},
	},
	// "every host ACK has a wrong ICRC: rxe silently drops them and resends
	// all 5 unACKed WRITEs every ~67 ms (go-back-N)": 290 bad ACKs, 290
	// WRITEs of which 5 are first sendings. Each resent WRITE is a
	// duplicate at the host, which ACKs it again: 285 + 285 duplicates.
	"host_badicrc.pcap": {
		conversations: 1,
		kinds:         map[Kind]int{BadICRC: 290, Retransmission: 285, Duplicate: 570},
		causes:        map[Cause]int{CauseTimeout: 285},
		named: []Anomaly{
			{Kind: BadICRC, Seq: 2, PSN: 0x0e6972},
			{Kind: Retransmission, Cause: CauseTimeout, Seq: 11, PSN: 0x0e6972},
			{Kind: Retransmission, Cause: CauseTimeout, Seq: 15, PSN: 0x0e6976},
		},
	},
}

// TestGoldenLadders draws every golden capture, checks the anomalies it
// names against what the capture's README says happened, and compares the
// text with testdata/NAME.ladder (go test -update rewrites them).
func TestGoldenLadders(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(golden.Dir(), "*.pcap"))
	if len(files) == 0 {
		t.Skipf("no golden captures in %s", golden.Dir())
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			w, ok := goldenLadders[name]
			if !ok {
				t.Fatalf("no expectations for %s: add them to goldenLadders from its README", name)
			}
			l := readCapture(t, path, Options{})
			checkLadder(t, l, w)
			var text bytes.Buffer
			if err := WriteText(&text, l); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", strings.TrimSuffix(name, ".pcap")+".ladder")
			if *update {
				if err := os.WriteFile(golden, text.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if !bytes.Equal(text.Bytes(), want) {
				t.Errorf("the ladder differs from %s (go test -update rewrites it):\n%s", golden, diffLines(string(want), text.String()))
			}
		})
	}
}

// checkLadder checks the conversations and anomalies of a ladder.
func checkLadder(t *testing.T, l *Ladder, w want) {
	t.Helper()
	if n := len(l.Conversations()); n != w.conversations {
		t.Errorf("%d conversations, want %d", n, w.conversations)
	}
	kinds, causes := map[Kind]int{}, map[Cause]int{}
	for _, an := range l.Anomalies() {
		kinds[an.Kind]++
		if an.Cause != 0 {
			causes[an.Cause]++
		}
		if an.Text == "" {
			t.Errorf("anomaly %+v has no text", an)
		}
	}
	for k := Kind(1); int(k) < len(kindNames); k++ {
		if kinds[k] != w.kinds[k] || l.Total(k) != w.kinds[k] {
			t.Errorf("%d (total %d) %v anomalies, want %d", kinds[k], l.Total(k), k, w.kinds[k])
		}
	}
	for c := Cause(1); int(c) < len(causeNames); c++ {
		if causes[c] != w.causes[c] {
			t.Errorf("%d retransmissions caused by %v, want %d", causes[c], c, w.causes[c])
		}
	}
	for _, n := range w.named {
		found := false
		for _, an := range l.Anomalies() {
			if an.Kind == n.Kind && an.Cause == n.Cause && an.Seq == n.Seq && an.PSN == n.PSN {
				found = true
			}
		}
		if !found {
			t.Errorf("no %v (%v) of PSN %v on arrow %d", n.Kind, n.Cause, n.PSN, n.Seq)
		}
	}
}

// diffLines shows the first lines that differ.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + itoa(i+1) + ":\nwant " + wl + "\ngot  " + gl
		}
	}
	return ""
}
