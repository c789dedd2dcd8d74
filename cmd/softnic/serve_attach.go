package main

import (
	"fmt"
	"net"
	"slices"

	"go.uber.org/zap"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
)

// Attach mode: other processes attach to the daemon's device through the
// control socket (nic.Config.Attach, SOFTNIC_SOCKET) and own PDs, regions
// and QPs in it; the listings name each resource's process.

// serveAttached serves a process that sent the attach command until it
// detaches; then everything it made is gone.
func (d *daemon) serveAttached(c *net.UnixConn) {
	if err := d.attach.ServeConn(c); err != nil {
		d.log.Debug("attach refused", zap.Error(err))
	}
}

// attachedPDs maps the protection domains of attached processes to their
// PIDs.
func (d *daemon) attachedPDs() map[mr.PD]int {
	owners := map[mr.PD]int{}
	for _, p := range d.attach.Processes() {
		for _, pd := range p.PDs {
			owners[pd] = p.PID
		}
	}
	return owners
}

// attachedQPRows lists the QPs of attached processes.
func (d *daemon) attachedQPRows() []qpRow {
	var rows []qpRow
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
func (d *daemon) attachedCounters() counterList {
	procs := d.attachedSums()
	l := counterList{{"attached_processes", uint64(len(procs))}}
	for _, p := range procs {
		prefix := fmt.Sprintf("pid%d_", p.pid)
		for _, c := range p.counters {
			l = append(l, counter{prefix + c.Name, c.Value})
		}
	}
	return l
}

// attachedProcess is one attached process's counters, summed over its
// sessions.
type attachedProcess struct {
	pid      int
	counters counterList // its resources ("pds", "qps"), then its sessions' counters
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
			procs = append(procs, attachedProcess{pid: p.PID})
		}
		l := procs[i].counters.add("pds", uint64(len(p.PDs))).add("qps", uint64(len(p.QPs)))
		for _, c := range p.Counters {
			l = l.add(c.Name, c.Value)
		}
		procs[i].counters = l
	}
	return procs
}

// add adds v to the counter name, appended to l if it is not there yet.
func (l counterList) add(name string, v uint64) counterList {
	if i := slices.IndexFunc(l, func(c counter) bool { return c.Name == name }); i >= 0 {
		l[i].Value += v
		return l
	}
	return append(l, counter{name, v})
}

// attachedPIDs counts the processes the sessions ps belong to: one
// attached twice counts once, as in attachedCounters.
func attachedPIDs(ps []nic.AttachedProcess) int {
	pids := map[int]bool{}
	for _, p := range ps {
		pids[p.PID] = true
	}
	return len(pids)
}
