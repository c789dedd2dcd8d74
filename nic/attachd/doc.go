// Package attachd is the daemon side of attach mode: it serves an
// embedded nic.Device to other processes of the host, which attach to it
// over a unix socket (nic.Config.Attach) and use it through the same API
// as their own. It owns the sessions of the attached processes and what
// each makes on the device: its PDs, regions, CQs, SRQs, QPs, listeners
// and connections, named by handles only it can use; the rings of each
// queue, in memory the process and the daemon both map, which package
// nic/attachd/internal/rings moves between the process and the device's
// QPs; each process's doorbell and its budget; who may attach (package
// nic/attachd/internal/admit), how fast each user's processes may
// (AttachPace), and what each process and user may hold (package
// nic/quota). When a process detaches, exits or dies,
// everything it made is destroyed.
//
// It drives the device through its public API and, for what a daemon
// needs beyond it (the QP's lock and transport while it fills the QP's
// queues from rings, the device's busy-polling reader, the device's
// socket read on the doorbell goroutine after it sent packets to the
// device itself), through the hooks the embedded device exports in
// package nic/internal/hooks; it speaks package nic/internal/attachproto
// with the attached provider. It trusts nothing it reads from a process:
// a corrupt ring or work request fails that QP alone, and a process that
// rings its doorbell for nothing is throttled. softnic serve
// (cmd/softnic/internal/daemon) runs it on its control socket; package
// nic/nictest runs one for tests.
package attachd
