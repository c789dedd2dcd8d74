// Package quota is what the softnic daemon allows the local processes
// attached to it: accounts of what each process, each user and all of
// them together hold in the daemon (sessions, waiting calls, objects,
// QPs, queue entries, shared memory, mappings, the daemon's own heap and
// descriptors spent on their behalf), charged and released in one place
// against limits per process, per user and in total (Ledger), with
// defaults derived from the machine (DefaultLimits); the identity of a
// process that survives the reuse of its PID (Identify); the accept
// loop's way through errors that pass, such as a process out of
// descriptors (Backoff); and the pace of admissions, accepts and
// attaches, that come faster than the daemon should spend on them
// (Pacer; UserPacers, one per user), and of a process's requests for
// nothing, such as doorbells that find no work (IdleBudget).
//
// A refusal is a *LimitError naming the limit, its value and the setting
// that raises it, and wrapping the errno-named sentinel of package mr the
// caller sees: ENOMEM for what holds memory or kernel objects, EAGAIN for
// what holds a daemon goroutine or session. Nothing here does I/O but
// reading /proc and the process's limits once.
package quota
