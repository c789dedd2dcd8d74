// Package netem emulates the faults of a network link, as Linux's netem
// queueing discipline does: packet loss, duplication, reordering, delay
// and corruption, drawn from seeded probabilities or aimed by rules at
// chosen packets (an opcode, a QP, a PSN), so that a run can be repeated
// exactly.
//
// Faults are a property of the link, not of the transport: package qp
// never sees them. The device (package nic) decides the fate of each
// packet it sends with an Injector (nic.Config.Faults, the SOFTNIC_FAULTS
// environment variable, the CLI's --faults), `softnic demo --scenario`
// aims rules at the packets its stories lose, and qp's tests put an
// Injector on their simulated link.
package netem

import "github.com/softnic/softnic/mr"

// ErrInvalid (EINVAL) is returned for a fault specification that cannot be
// read. It is the same value as mr's and qp's, so that errors.Is works
// whichever layer refused.
var ErrInvalid = mr.ErrInvalid
