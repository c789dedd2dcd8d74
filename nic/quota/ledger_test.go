package quota

import (
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/softnic/softnic/mr"
)

// testLimits allows each process 4 QPs and 1 MiB, each user 6 QPs and
// 1 MiB, everyone 8 QPs and 2 MiB, and 2 sessions a process.
func testLimits() Limits {
	var l Limits
	for s := range NumScopes {
		for r := range NumResources {
			l[s][r] = math.MaxInt64
		}
	}
	l[Process][QPs], l[User][QPs], l[Total][QPs] = 4, 6, 8
	l[Process][Memory], l[User][Memory], l[Total][Memory] = 1<<20, 1<<20, 2<<20
	l[Process][Sessions] = 2
	return l
}

// TestLedgerScopes: a charge is refused at the first limit it would pass,
// the process's, then its user's, then everyone's, with an error naming
// the limit, its value and the setting that raises it, wrapping ENOMEM or
// EAGAIN; a refused charge takes nothing.
func TestLedgerScopes(t *testing.T) {
	l := NewLedger(testLimits(), "softnic serve --limit")
	p1 := l.Open(ProcessID{PID: 1, Start: 10}, 1000)
	p2 := l.Open(ProcessID{PID: 2, Start: 20}, 1000)
	p3 := l.Open(ProcessID{PID: 3, Start: 30}, 2000)
	steps := []struct {
		name  string
		h     *Holder
		bill  Bill
		scope Scope // of the refusal; -1 for none
		res   Resource
		errno error
		text  string
	}{
		{"within every limit", p1, Of(QPs, 3).Plus(Memory, 1<<19), -1, 0, nil, ""},
		{"past the process's", p1, Of(QPs, 2), Process, QPs, mr.ErrNoMem,
			"process 1 (uid 1000): 3 QPs; 2 more would pass the limit of 4 (softnic serve --limit process.qps=N raises it): cannot allocate memory (ENOMEM)"},
		{"the last of the process's", p1, Of(QPs, 1), -1, 0, nil, ""},
		{"past the user's", p2, Of(QPs, 3), User, QPs, mr.ErrNoMem,
			"uid 1000: 4 QPs; 3 more would pass the limit of 6"},
		{"past the user's memory", p2, Of(Memory, 768<<10), User, Memory, mr.ErrNoMem,
			"uid 1000: 512 KiB of shared memory mapped; 768 KiB more would pass the limit of 1 MiB"},
		{"another user's", p3, Of(QPs, 4), -1, 0, nil, ""},
		{"past everyone's", p2, Of(QPs, 1), Total, QPs, mr.ErrNoMem,
			"the attached processes together: 8 QPs; 1 more would pass the limit of 8"},
		{"sessions refused with EAGAIN", p3, Of(Sessions, 3), Process, Sessions, mr.ErrAgain,
			"process 3 (uid 2000): 0 attach sessions; 3 more would pass the limit of 2 (softnic serve --limit process.sessions=N raises it): resource temporarily unavailable (EAGAIN)"},
	}
	for _, st := range steps {
		before := l.Usage()
		err := st.h.Charge(st.bill)
		var le *LimitError
		switch {
		case st.scope < 0 && err != nil:
			t.Errorf("%s: %v", st.name, err)
		case st.scope < 0:
		case !errors.As(err, &le) || le.Scope != st.scope || le.Resource != st.res || !errors.Is(err, st.errno):
			t.Errorf("%s: %v, want a refusal of %s.%s wrapping %v", st.name, err, st.scope, st.res, st.errno)
		case !strings.HasPrefix(err.Error(), st.text):
			t.Errorf("%s: %q, want it to start %q", st.name, err, st.text)
		case l.Usage().Total != before.Total:
			t.Errorf("%s: a refused charge changed the total from %v to %v", st.name, before.Total, l.Usage().Total)
		}
	}
	u := l.Usage()
	if u.Total[QPs] != 8 || u.Refused[QPs] != 3 || u.Refused[Memory] != 1 || u.Refused[Sessions] != 1 {
		t.Errorf("total %v refused %v, want 8 QPs and 3, 1, 1 refusals of QPs, memory, sessions", u.Total, u.Refused)
	}
	if len(u.Processes) != 3 || u.Processes[0].Used[QPs] != 4 || u.Processes[1].Refused != 3 || u.Processes[2].UID != 2000 {
		t.Errorf("processes %+v", u.Processes)
	}
	if len(u.Users) != 2 || u.Users[0].UID != 1000 || u.Users[0].Used[QPs] != 4 || u.Users[0].Refused != 4 || u.Users[1].Used[QPs] != 4 {
		t.Errorf("users %+v", u.Users)
	}
}

// TestLedgerAccounts: an account lives while a session of its process is
// open or something is charged to it, released after the session closed
// included; a new process with the PID of one gone has an account of its
// own.
func TestLedgerAccounts(t *testing.T) {
	l := NewLedger(testLimits(), "")
	old := ProcessID{PID: 7, Start: 100}
	h := l.Open(old, 1000)
	if err := h.Charge(Of(QPs, 4)); err != nil {
		t.Fatal(err)
	}
	h.Close()
	reused := l.Open(ProcessID{PID: 7, Start: 200}, 1000)
	if err := reused.Charge(Of(QPs, 2)); err != nil {
		t.Errorf("a new process with a reused PID is charged with the old one's QPs: %v", err)
	}
	if err := reused.Charge(Of(QPs, 1)); err == nil || !strings.Contains(err.Error(), "limit uid.qps") {
		t.Errorf("the user's limit counts both: %v", err)
	}
	if u := l.Usage(); len(u.Processes) != 2 || len(u.Users) != 1 {
		t.Errorf("%d processes, %d users, want 2 and 1 (the closed one still holds QPs)", len(u.Processes), len(u.Users))
	}
	h.Release(Of(QPs, 4)) // a connection of the old process closed in the background
	reused.Release(Of(QPs, 2))
	if u := l.Usage(); len(u.Processes) != 1 || u.Total != (Bill{}) {
		t.Errorf("processes %+v, total %v; want the open one alone and nothing held", u.Processes, u.Total)
	}
	reused.Close()
	if u := l.Usage(); len(u.Processes) != 0 || len(u.Users) != 0 {
		t.Errorf("accounts left: %+v", u)
	}
}

// TestDefaultLimits: the defaults of a laptop and of a large server, each
// scope within the wider one, and three quarters of the QPs at most for
// attached processes.
func TestDefaultLimits(t *testing.T) {
	tests := []struct {
		name string
		m    Machine
		want map[string]int64
	}{
		{"laptop", Machine{RAM: 16 << 30, Descriptors: 1024, MaxMapCount: 65530, QPs: 16384}, map[string]int64{
			"process.qps": 2048, "uid.qps": 4096, "total.qps": 12288,
			"process.memory": 8 << 30, "total.memory": 16 << 30, "process.heap": 512 << 20, "total.heap": 2 << 30,
			"process.mappings": 8191, "total.mappings": 32765, "total.descriptors": 768, "process.descriptors": 96,
		}},
		{"128 cores, 1 TiB", Machine{RAM: 1 << 40, Descriptors: 1 << 20, MaxMapCount: 1 << 20, QPs: 16384}, map[string]int64{
			"process.memory": 512 << 30, "uid.memory": 768 << 30, "process.heap": 32 << 30,
			"total.mappings": 1 << 19, "total.descriptors": 786432, "process.sessions": 64, "total.waits": 16384,
		}},
		{"tiny", Machine{RAM: 1 << 20, Descriptors: 8, MaxMapCount: 4, QPs: 2}, map[string]int64{
			"process.qps": 1, "uid.qps": 1, "total.qps": 2, "process.descriptors": 1, "total.descriptors": 6,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultLimits(tt.m)
			for key, want := range tt.want {
				sc, rs, _ := strings.Cut(key, ".")
				s, r := Scope(slices.Index(scopeNames[:], sc)), Resource(slices.Index(resourceNames[:], rs))
				if got := l[s][r]; got != want {
					t.Errorf("%s = %d, want %d", key, got, want)
				}
			}
			for r := range NumResources {
				if !(0 < l[Process][r] && l[Process][r] <= l[User][r] && l[User][r] <= l[Total][r]) {
					t.Errorf("%s: process %d, uid %d, total %d", Resource(r), l[Process][r], l[User][r], l[Total][r])
				}
			}
		})
	}
}

func TestLimitsSet(t *testing.T) {
	var l Limits
	for _, ok := range []struct {
		key string
		n   int64
	}{{"process.qps", 4096}, {"uid.memory", 64 << 30}, {"total.waits", math.MaxInt64}} {
		if err := l.Set(ok.key, ok.n); err != nil {
			t.Errorf("Set(%s, %d): %v", ok.key, ok.n, err)
		}
	}
	if l[Process][QPs] != 4096 || l[User][Memory] != 64<<30 || l[Total][Waits] != math.MaxInt64 {
		t.Errorf("limits %v", l)
	}
	for _, bad := range []struct {
		key string
		n   int64
	}{{"qps", 1}, {"host.qps", 1}, {"process.cpus", 1}, {"process.qps", 0}, {"process.qps", -1}} {
		if err := l.Set(bad.key, bad.n); !errors.Is(err, mr.ErrInvalid) {
			t.Errorf("Set(%s, %d): %v, want ErrInvalid", bad.key, bad.n, err)
		}
	}
}

func TestStartTime(t *testing.T) {
	tests := []struct {
		stat string
		want uint64
		ok   bool
	}{
		{"1234 (softnic) S 1 1234 1234 0 -1 4194560 500 0 0 0 10 5 0 0 20 0 12 0 98765 1000000 500 18446744073709551615", 98765, true},
		{"1234 (a) b) (c) R 1 1234 1234 0 -1 4194560 500 0 0 0 10 5 0 0 20 0 12 0 42 1000000", 42, true},
		{"1234 (softnic) S 1 2 3", 0, false},
		{"garbage", 0, false},
	}
	for _, tt := range tests {
		if got, ok := startTime([]byte(tt.stat)); got != tt.want || ok != tt.ok {
			t.Errorf("startTime(%q) = %d, %v; want %d, %v", tt.stat, got, ok, tt.want, tt.ok)
		}
	}
	if id := Identify(os.Getpid()); id.PID != os.Getpid() || id.Start == 0 {
		t.Errorf("Identify(self) = %+v, want a start time", id)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 12 << 30: "12 GiB", 1<<20 + 1: "1.0 MiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
