package daemon

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/cmd/softnic/internal/metrics"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/quota"
)

// Attach mode: other processes attach to the daemon's device through the
// control socket (nic.Config.Attach, SOFTNIC_SOCKET) and own PDs, regions
// and QPs in it; the listings name each resource's process.

// viewer is who asks over the control socket. The daemon's owner (its
// user, or root) sees everything; another user, admitted by
// --allow-group, sees only what their own processes own: the keys,
// addresses and PSNs of another process's regions and QPs are what it
// takes to write into its memory, or to take over its connection.
type viewer struct {
	all  bool
	uid  int
	pids map[int]bool // the viewer's attached processes
}

// viewerOf returns the viewer peer is.
func (d *daemon) viewerOf(peer nic.PeerCred) viewer {
	v := viewer{all: peer.UID == os.Geteuid() || peer.UID == 0, uid: peer.UID, pids: map[int]bool{}}
	if !v.all {
		for _, p := range d.attach.Processes() {
			if p.UID == peer.UID {
				v.pids[p.PID] = true
			}
		}
	}
	return v
}

// sees reports whether the viewer may see what process pid owns.
func (v viewer) sees(pid int) bool { return v.all || v.pids[pid] }

// visible returns the rows the viewer may see, pid telling each row's
// owner.
func visible[T any](v viewer, rows []T, pid func(T) int) []T {
	if v.all {
		return rows
	}
	return slices.DeleteFunc(rows, func(r T) bool { return !v.sees(pid(r)) })
}

// serveAttached serves a process that sent the attach command, line,
// until it detaches; then everything it made is gone.
func (d *daemon) serveAttached(c *net.UnixConn, line []byte) {
	if err := d.attach.ServeConn(c, line); err != nil {
		d.log.Debug("attach refused", zap.Error(err))
	}
}

// attachedPDs maps the protection domains of attached processes to their
// PIDs.
func (d *daemon) attachedPDs() map[mr.PDHandle]int {
	owners := map[mr.PDHandle]int{}
	for _, p := range d.attach.Processes() {
		for _, pd := range p.PDs {
			owners[pd] = p.PID
		}
	}
	return owners
}

// attachedQPRows lists the QPs of attached processes.
func (d *daemon) attachedQPRows() []control.QPRow {
	var rows []control.QPRow
	for _, p := range d.attach.Processes() {
		for _, q := range p.QPs {
			rows = append(rows, newQPRow(q, p.PID, p.Connected[q.Num()]))
		}
	}
	return rows
}

// attachedCounters counts the attached processes, and for each its
// resources and its use of the shared queues, as pid<PID>_<name>. A
// process attached more than once (two libraries opening the device, say)
// counts once, with the sums of its sessions: the other listings name an
// owner by PID alone, and a session number would name nothing a user can
// see, nor stay put when an earlier session detaches. A detached session's
// counts leave the sums, as a detached process's leave the listing.
//
// Beside them are what the attached processes hold in the daemon against
// their limits (quota): all of them together (quota_total_<resource> and
// its _limit), each user (quota_uid<UID>_<resource>, _limit, _refused),
// each process (pid<PID>_<resource>, _limit, _refused), and the charges
// refused by the resource they asked for (quota_refused_<resource>). A
// viewer who is not the daemon's owner sees their own uid and processes
// only.
func (d *daemon) attachedCounters(v viewer) control.Counters {
	procs := d.attachedSums()
	u := d.attach.Usage()
	l := control.Counters{{Name: "attached_processes", Value: uint64(len(procs))}}
	l = append(l, quotaCounters("quota_total_", u.Total, u.Limits[quota.Total], nil)...)
	for r := range quota.NumResources {
		l = append(l, control.Counter{Name: "quota_refused_" + r.String(), Value: u.Refused[r]})
	}
	for _, a := range u.Users {
		if v.all || a.UID == v.uid {
			l = append(l, quotaCounters(fmt.Sprintf("quota_uid%d_", a.UID), a.Used, u.Limits[quota.User], &a.Refused)...)
		}
	}
	// Processes by PID in the order they attached, then those detached
	// that still hold something (a connection closing): a PID reused
	// while its last holder is releasing sums both.
	held := map[int]quota.ProcessUsage{}
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.pid)
	}
	for _, a := range u.Processes {
		h, ok := held[a.ID.PID]
		if !ok && !slices.Contains(pids, a.ID.PID) {
			pids = append(pids, a.ID.PID)
		}
		h.UID, h.Used, h.Refused = a.UID, h.Used.Add(a.Used), h.Refused+a.Refused
		held[a.ID.PID] = h
	}
	for _, pid := range pids {
		h := held[pid]
		i := slices.IndexFunc(procs, func(p attachedProcess) bool { return p.pid == pid })
		if !v.all && !(i >= 0 && procs[i].uid == v.uid) && !(i < 0 && h.UID == v.uid) {
			continue
		}
		prefix := fmt.Sprintf("pid%d_", pid)
		var sums control.Counters
		if i >= 0 {
			sums = procs[i].counters
			l = append(l, control.Counter{Name: prefix + "pds", Value: sums[0].Value})
		}
		l = append(l, quotaCounters(prefix, h.Used, u.Limits[quota.Process], &h.Refused)...)
		for _, c := range sums[min(len(sums), attachedResources):] {
			l = append(l, control.Counter{Name: prefix + c.Name, Value: c.Value})
		}
	}
	return l
}

// quotaSnapshot adds to s what the attached processes hold against their
// limits, as stat's quota counters show it.
func (d *daemon) quotaSnapshot(s *metrics.Snapshot) {
	u := d.attach.Usage()
	add := func(uid string, used, limits quota.Bill) {
		for r := range quota.NumResources {
			s.Quotas = append(s.Quotas, metrics.Quota{UID: uid, Resource: r.String(), Used: uint64(used[r]), Limit: uint64(limits[r])})
		}
	}
	add("", u.Total, u.Limits[quota.Total])
	for r := range quota.NumResources {
		s.QuotaRefused = append(s.QuotaRefused, metrics.Counter{Name: r.String(), Value: u.Refused[r]})
	}
	for _, a := range u.Users {
		add(strconv.Itoa(a.UID), a.Used, u.Limits[quota.User])
		s.UserRefused = append(s.UserRefused, metrics.Counter{Name: strconv.Itoa(a.UID), Value: a.Refused})
	}
}

// quotaCounters are what one account holds against its limits, and its
// refusals if it counts them, each named with prefix.
func quotaCounters(prefix string, used quota.Bill, limits quota.Bill, refused *uint64) control.Counters {
	var l control.Counters
	for r := range quota.NumResources {
		l = append(l, control.Counter{Name: prefix + r.String(), Value: uint64(used[r])}, control.Counter{Name: prefix + r.String() + "_limit", Value: uint64(limits[r])})
	}
	if refused != nil {
		l = append(l, control.Counter{Name: prefix + "refused", Value: *refused})
	}
	return l
}

// attachedProcess is one attached process's counters, summed over its
// sessions.
type attachedProcess struct {
	pid, uid int
	counters control.Counters // its resources ("pds", "qps"), then its sessions' counters
}

// attachedResources is how many counters of an attachedProcess count its
// resources now; the rest are cumulative counts.
const attachedResources = 2

// attachedSums sums the counters of the attached processes' sessions by
// process, in the order the processes attached.
func (d *daemon) attachedSums() []attachedProcess {
	var procs []attachedProcess
	for _, p := range d.attach.Processes() {
		i := slices.IndexFunc(procs, func(a attachedProcess) bool { return a.pid == p.PID })
		if i < 0 {
			i = len(procs)
			procs = append(procs, attachedProcess{pid: p.PID, uid: p.UID})
		}
		l := procs[i].counters.Add("pds", uint64(len(p.PDs))).Add("qps", uint64(len(p.QPs)))
		for _, c := range p.Counters {
			l = l.Add(c.Name, c.Value)
		}
		procs[i].counters = l
	}
	return procs
}

// attachedPIDs counts the processes the sessions ps belong to: one
// attached twice counts once, as in attachedCounters.
func attachedPIDs(ps []attachd.Process) int {
	pids := map[int]bool{}
	for _, p := range ps {
		pids[p.PID] = true
	}
	return len(pids)
}
