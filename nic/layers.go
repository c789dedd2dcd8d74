package nic

import (
	"context"
	"unsafe"

	"github.com/softnic/softnic/verbs"
)

// What a layer built on the public API needs beyond the verbs: package
// nic/fabric, the libfabric face, keeps its own table of operations in
// flight over a QP and a CQ and finds local buffers by address, as
// libfabric's verbs provider does over libibverbs.

// Device returns the device the PD belongs to (ibv_pd's context).
func (pd *PD) Device() *Device { return pd.dev }

// PD returns the protection domain the region belongs to (ibv_mr's pd).
func (m *MR) PD() *PD { return m.pd.Load() }

// SGEAt returns the SGE of the n bytes at machine address addr, in a
// region of pd that holds them all, or false if none does. It is for
// callers that take buffers without their region (fi_mr's desc may be
// omitted when the domain does not require FI_MR_LOCAL); the lookup costs
// a search of the region table.
func (pd *PD) SGEAt(addr, n uint64) (verbs.SGE, bool) { return pd.prov.SGEAt(addr, n) }

// PollOnly is Poll without progress: it takes the completions the CQ holds
// and, when it holds none, returns at once instead of processing the
// packets the device has received. A layer that polls several times for
// one call of its own drives the device once, with Poll, and polls the
// rest with PollOnly, as CQ.Wait does.
func (c *CQ) PollOnly(wcs []verbs.WC) (int, error) { return c.poll(wcs, false) }

// WaitPoll is Wait with the caller's poll: it calls poll until poll
// returns a count or an error, sleeping between calls until the CQ is
// written to, ctx ends or the device closes. poll takes work completions
// with PollOnly; it is for a layer that turns them into completions of its
// own under its own lock, where some work completions yield none.
func (c *CQ) WaitPoll(ctx context.Context, poll func() (int, error)) (int, error) {
	return c.wait(ctx, poll, c.held)
}

// addrOf is the address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
