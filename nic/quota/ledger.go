package quota

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/softnic/softnic/mr"
)

// Resource is something a process holds in the daemon.
type Resource int

const (
	Sessions    Resource = iota // attach sessions: a socket, a doorbell and two goroutines each (EAGAIN)
	Waits                       // calls waiting for the network, each a goroutine of the daemon (EAGAIN)
	Objects                     // handles: PDs, regions, windows, CQs, SRQs, QPs, listeners, requests, connections
	QPs                         // QPs of the device
	CQEntries                   // completions its CQs hold
	SRQEntries                  // receive work requests its SRQs hold
	Memory                      // bytes of shared memory the daemon maps for it: regions and rings
	Mappings                    // mappings the daemon holds for it (of vm.max_map_count)
	Heap                        // bytes of the daemon's heap spent for it: queue arrays, goroutines, buffers
	Descriptors                 // descriptors the daemon holds for it: its socket, eventfds
	NumResources
)

var resourceNames = [NumResources]string{
	"sessions", "waits", "objects", "qps", "cq_entries", "srq_entries", "memory", "mappings", "heap", "descriptors",
}

// resourceText describes an amount of each resource in an error.
var resourceText = [NumResources]string{
	"attach sessions", "waiting calls", "objects", "QPs", "CQ entries", "SRQ entries",
	"of shared memory mapped", "mappings", "of the daemon's heap", "descriptors",
}

func (r Resource) String() string { return resourceNames[r] }

// bytes reports whether r counts bytes.
func (r Resource) bytes() bool { return r == Memory || r == Heap }

// errno is the sentinel a refusal of r wraps: EAGAIN for what holds a
// goroutine of the daemon (wait for one to end and try again), ENOMEM for
// the rest, as rxe's object pools answer.
func (r Resource) errno() error {
	if r == Sessions || r == Waits {
		return mr.ErrAgain
	}
	return mr.ErrNoMem
}

// Scope is who a limit applies to.
type Scope int

const (
	Process Scope = iota // one process (ProcessID)
	User                 // the processes of one uid
	Total                // every attached process
	NumScopes
)

var scopeNames = [NumScopes]string{"process", "uid", "total"}

func (s Scope) String() string { return scopeNames[s] }

// Bill is an amount of each resource.
type Bill [NumResources]int64

// Of returns a bill of n of r.
func Of(r Resource, n int64) Bill {
	var b Bill
	b[r] = n
	return b
}

// Plus returns b with n more of r.
func (b Bill) Plus(r Resource, n int64) Bill {
	b[r] += n
	return b
}

// Add returns b + o.
func (b Bill) Add(o Bill) Bill {
	for r, n := range o {
		b[r] += n
	}
	return b
}

func (b Bill) zero() bool { return b == Bill{} }

// Limits are the most of each resource each scope may hold.
type Limits [NumScopes]Bill

// ProcessID names a process for as long as it lives: its PID and the
// time it started, so that a process that reuses the PID of one that
// exited is another (see Identify).
type ProcessID struct {
	PID   int
	Start uint64 // clock ticks after boot (/proc/PID/stat's starttime); 0 if unknown
}

// Ledger keeps what each attached process, each user and all of them hold
// in the daemon, and refuses what would take any of them past its limit.
// Everything is charged and released through Holders, in one place, under
// one lock; it is not on the data path. It is safe for concurrent use.
type Ledger struct {
	flag string

	mu      sync.Mutex
	limits  Limits
	procs   map[ProcessID]*account
	users   map[int]*account
	total   account
	refused [NumResources]uint64
}

// account is what one process, one user or everyone holds.
type account struct {
	used    Bill
	holders int    // open Holders
	refused uint64 // charges refused
	uid     int    // a process's user
}

// NewLedger returns a ledger with limits. A refusal names the setting
// that raises a limit as flag followed by scope.resource=N (softnic serve
// passes "softnic serve --limit").
func NewLedger(limits Limits, flag string) *Ledger {
	return &Ledger{flag: flag, limits: limits, procs: make(map[ProcessID]*account), users: make(map[int]*account)}
}

// Limits returns the ledger's limits.
func (l *Ledger) Limits() Limits { return l.limits }

// Holder charges one process's resources to its account, its user's and
// the total. Every charge must be released through the same Holder, which
// stays usable after Close for what is released later (a connection
// closing in the background).
type Holder struct {
	l          *Ledger
	id         ProcessID
	uid        int
	proc, user *account
}

// Open returns a holder for process id of user uid: a session of the
// process. Close it when the session ends.
func (l *Ledger) Open(id ProcessID, uid int) *Holder {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.procs[id]
	if p == nil {
		p = &account{uid: uid}
		l.procs[id] = p
	}
	u := l.users[uid]
	if u == nil {
		u = &account{uid: uid}
		l.users[uid] = u
	}
	p.holders++
	u.holders++
	return &Holder{l: l, id: id, uid: uid, proc: p, user: u}
}

// Close ends the session; the accounts go once nothing is charged to them.
func (h *Holder) Close() {
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	h.proc.holders--
	h.user.holders--
	l.forgetLocked(h)
}

// forgetLocked drops the accounts of h that no holder has open and nothing
// is charged to.
func (l *Ledger) forgetLocked(h *Holder) {
	if h.proc.holders == 0 && h.proc.used.zero() {
		delete(l.procs, h.id)
	}
	if h.user.holders == 0 && h.user.used.zero() {
		delete(l.users, h.uid)
	}
}

// Charge adds b to the process's account, its user's and the total, or
// refuses it all with a *LimitError naming the first limit it would pass
// (the process's, then the user's, then the total) and counts the refusal.
func (h *Holder) Charge(b Bill) error {
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	accts := [NumScopes]*account{h.proc, h.user, &l.total}
	for s, a := range accts {
		for r, n := range b {
			if lim := l.limits[s][r]; n > 0 && a.used[r]+n > lim {
				l.refused[r]++
				h.proc.refused++
				h.user.refused++
				return &LimitError{Scope: Scope(s), Resource: Resource(r), Who: h.who(Scope(s)),
					Limit: lim, Used: a.used[r], Asked: n, Flag: l.flag}
			}
		}
	}
	for _, a := range accts {
		for r, n := range b {
			a.used[r] += n
		}
	}
	return nil
}

// Release gives back b, which the holder charged.
func (h *Holder) Release(b Bill) {
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range [...]*account{h.proc, h.user, &l.total} {
		for r, n := range b {
			a.used[r] -= n
		}
	}
	l.forgetLocked(h)
}

// who names the holder's account of scope s.
func (h *Holder) who(s Scope) string {
	switch s {
	case Process:
		return fmt.Sprintf("process %d (uid %d)", h.id.PID, h.uid)
	case User:
		return fmt.Sprintf("uid %d", h.uid)
	}
	return "the attached processes together"
}

// Usage is what the ledger's accounts hold, for softnic stat.
type Usage struct {
	Limits    Limits
	Total     Bill
	Refused   [NumResources]uint64 // charges refused, by the resource they asked for
	Processes []ProcessUsage       // by PID
	Users     []UserUsage          // by uid
}

// ProcessUsage is what one process holds.
type ProcessUsage struct {
	ID      ProcessID
	UID     int
	Used    Bill
	Refused uint64
}

// UserUsage is what the processes of one user hold.
type UserUsage struct {
	UID     int
	Used    Bill
	Refused uint64
}

// Usage returns what every account holds now.
func (l *Ledger) Usage() Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := Usage{Limits: l.limits, Total: l.total.used, Refused: l.refused}
	for id, a := range l.procs {
		u.Processes = append(u.Processes, ProcessUsage{ID: id, UID: a.uid, Used: a.used, Refused: a.refused})
	}
	for uid, a := range l.users {
		u.Users = append(u.Users, UserUsage{UID: uid, Used: a.used, Refused: a.refused})
	}
	slices.SortFunc(u.Processes, func(a, b ProcessUsage) int {
		return cmp.Or(cmp.Compare(a.ID.PID, b.ID.PID), cmp.Compare(a.ID.Start, b.ID.Start))
	})
	slices.SortFunc(u.Users, func(a, b UserUsage) int { return cmp.Compare(a.UID, b.UID) })
	return u
}

// LimitError is a charge refused: Who would hold Used+Asked of Resource,
// past its Limit. It wraps ErrAgain or ErrNoMem (see Resource).
type LimitError struct {
	Scope              Scope
	Resource           Resource
	Who                string
	Limit, Used, Asked int64
	Flag               string // the setting that raises limits, such as "softnic serve --limit"
}

func (e *LimitError) Error() string {
	amount := func(n int64) string {
		if e.Resource.bytes() {
			return FormatSize(n)
		}
		return fmt.Sprint(n)
	}
	how := fmt.Sprintf("the limit %s.%s", e.Scope, e.Resource)
	if e.Flag != "" {
		how = fmt.Sprintf("%s %s.%s=N raises it", e.Flag, e.Scope, e.Resource)
	}
	return fmt.Sprintf("%s: %s %s; %s more would pass the limit of %s (%s): %v",
		e.Who, amount(e.Used), resourceText[e.Resource], amount(e.Asked), amount(e.Limit), how, e.Resource.errno())
}

func (e *LimitError) Unwrap() error { return e.Resource.errno() }

// FormatSize writes n bytes as people read them: 1.5 GiB, 64 KiB, 100 B.
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for ; (v >= 1024 || v <= -1024) && i < len(units)-1; i++ {
		v /= 1024
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %ciB", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
