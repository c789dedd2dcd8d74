// Package shm is what an attached process and the softnic daemon share in
// attach mode: the layout of the queues both map (send, receive and
// completion rings of fixed-size slots), the encoding of work requests and
// completions in those slots, sealed memfd mappings, the wakeups
// (eventfds waited on through epoll fds, wait.go), and the unix-socket
// transport that carries control messages with file descriptors
// (SCM_RIGHTS) between the two. Memfds and eventfds are
// Linux's (memfd_linux.go): elsewhere, and in a Linux build with the
// softnic_portable tag, Supported, Create, Map and NewEventFD return
// mr.ErrNotSupported, and without SCM_RIGHTS (Windows) a Conn carries
// lines but no descriptors.
//
// The model is the rxe userspace provider's: each queue is a ring with a
// producer index written only by the side that fills slots and a consumer
// index written only by the side that empties them; an index is published
// with an atomic store after the slots it covers are written, and read with
// an atomic load before they are read. Posting a work request writes a slot
// and the producer index and rings a doorbell; completions are read
// straight from the completion ring, without a system call.
//
// Nothing here trusts the other side. Decoders copy a slot out of shared
// memory before they look at it, read every field once and bound it
// (ErrCorrupt); mappings received from a peer must be memfds sealed against
// shrinking, so that the peer cannot truncate memory under the reader.
// Package shm does no I/O on the data path beyond the eventfd writes of
// doorbells and wakeups, and imports nothing of softnic but the types of
// qp and mr.
package shm
