// Package verbs is the vocabulary of the verbs interface that softnic's
// transport shares with the layers above it: send and receive work requests
// (ibv_send_wr, ibv_recv_wr, ibv_sge) and their opcodes and flags, work
// completions with their ibv_wc_status names, QP types, states and
// attributes (ibv_qp_attr and its mask), the IBTA's modify-QP table of which
// attributes each state transition requires and takes, what a device
// supports (ibv_device_attr), and the counters a device keeps, named as
// rxe's hw_counters.
//
// It holds values and tables only: no queue, no state machine and no I/O.
// Package qp executes what these values describe; package nic, the attach
// protocol and the CLI pass them around and print them.
package verbs
