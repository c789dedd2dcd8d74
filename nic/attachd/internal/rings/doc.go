// Package rings is the daemon's end of the queues an attached process
// shares with it (package nic/attachd): it takes the work requests the
// process posts to a QP's send and receive rings, and to an SRQ's ring,
// into the device's queues of package qp, and writes the completions the
// device pushes to a CQ into that CQ's ring. It owns the rings' memory,
// the indexes the daemon publishes in them and the scratch space their
// work requests are decoded into, so that the data path does not
// allocate.
//
// Everything read from a ring is copied out and checked first (shm's
// decoders): a ring whose index cannot be right, or a work request that
// does not check, fails its QP alone (LOC_QP_OP_ERR, QP in the error
// state). It knows nothing of sessions, handles, quotas or doorbells:
// what the daemon must do about a ring (look at a QP that was posted to
// while its doorbell flag was clear, fail a QP whose completion a full
// ring lost, find the rings of the QP a completion is for) goes through
// Owner, and what it counts through Counts.
package rings

import (
	"sync/atomic"

	"github.com/softnic/softnic/nic/shm"
)

// Counts are the counters of the process whose rings these are.
type Counts struct {
	SendWQEs, RecvWQEs *atomic.Uint64 // work requests taken from send and receive (and SRQ) rings
	CQEs               *atomic.Uint64 // completions written to completion rings
	CQOverflows        *atomic.Uint64 // completions lost to a full completion ring
	BadQueues          *atomic.Uint64 // QPs failed for a corrupt work request or ring index
}

// Owner is the process whose rings these are, as its CQs' rings need it.
type Owner interface {
	// QP returns the rings of the process's QP numbered qpn, nil if it
	// has none.
	QP(qpn uint32) *QP
	// Overflowed has the process's QP numbered qpn moved to the error
	// state: a full completion ring lost a completion of its. It is
	// called with the CQ's lock and the QP's held.
	Overflowed(qpn uint32)
}

// newRing makes a ring of n slots of size bytes in a memfd of its own.
func newRing(name string, n, size int) (*shm.Mapping, shm.Ring, error) {
	m, err := shm.Create(name, shm.RingSize(n, size))
	if err != nil {
		return nil, shm.Ring{}, err
	}
	r, err := shm.NewRing(m.Bytes(), n, size)
	if err != nil {
		m.Close()
		return nil, shm.Ring{}, err
	}
	return m, r, nil
}
