// Package embedded is the embedded provider of package nic: the NIC run
// in the process. It owns the device's UDP socket and the goroutines that
// read it and run its timers, the region table, the PDs, CQs, SRQs and
// QPs of package qp that it drives with packets and time, and their
// table; the packet path (the ICRC checked, each packet handed to its QP,
// the answers sent in batches through the fault injector and the trace,
// the path MTU lowered on EMSGSIZE), who processes packets when (the
// reader goroutine, a poller or a CQ waiter: progress.go), the checks
// between QPs of one device (local.go), the multicast groups its UD QPs
// attach to, with a socket of each group's (mcast.go), and the device's
// counters and ibv_query_device's answer. Its connection manager is package
// nic/internal/cmhost's, hosted on the device's QP1: the device lends it
// QPs, its clock, timers and counters, and serves Listen and Dial with it
// (cm.go).
//
// It implements the interfaces of package nic/internal/provider and knows
// nothing of nic's public types: nic wraps its objects, and what goes back
// up (a QP to wrap, a QP's error) goes through provider.Up. A daemon that
// serves the device to attached processes (package nic/attachd) drives it
// through the interfaces of package nic/internal/hooks (hooks.go). Its
// R_Key guard is package nic/internal/guard, its routes to peers package
// nic/internal/route, its timer queue package nic/internal/timers.
package embedded
