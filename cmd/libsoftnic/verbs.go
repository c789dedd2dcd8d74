//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/softnic/softnic/cmd/libsoftnic/internal/pages"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// The verbs on PDs, regions, windows, CQs, SRQs and QPs. The C layer
// allocates each object and frees it; these functions make and destroy
// its Go side, named by the object's handle.

func handleOf[T any](h C.uintptr_t) T { return cgo.Handle(h).Value().(T) }

//export snAllocPD
func snAllocPD(ctx *C.struct_ibv_context, pd *C.struct_sn_pd) C.int {
	p, err := deviceOf(ctx).dev.AllocPD()
	if err != nil {
		return errnoOf(err)
	}
	pd.h = C.uintptr_t(cgo.NewHandle(p))
	return 0
}

//export snDeallocPD
func snDeallocPD(pd *C.struct_sn_pd) C.int {
	if err := handleOf[*nic.PD](pd.h).Dealloc(); err != nil {
		return errnoOf(err)
	}
	cgo.Handle(pd.h).Delete()
	return 0
}

var (
	shadowOnce sync.Once
	shadow     *pages.Shadow
	shadowErr  error
)

// region is the Go side of an ibv_mr: the pages it shares and the region.
type region struct {
	m    *nic.MR
	addr uintptr
	n    uintptr
}

// regions finds the process's regions by their lkey, for the verbs that
// name a region by an SGE (ibv_advise_mr).
var regions struct {
	sync.Mutex
	byKey map[uint32]*region
}

// snRegMR registers length bytes at addr at address iova (ibv_reg_mr,
// ibv_reg_mr_iova2): the pages move onto the shadow memfd (package
// pages), which the daemon maps.
//
//export snRegMR
func snRegMR(pd *C.struct_sn_pd, m *C.struct_sn_mr, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.int) C.int {
	p := handleOf[*nic.PD](pd.h)
	a, n := uintptr(addr), uintptr(length)
	// The optional access bits (relaxed ordering …) are hints a device
	// that does not know them ignores.
	access &^= C.IBV_ACCESS_OPTIONAL_RANGE
	if mr.Access(access)&mr.OnDemand != 0 && a == 0 {
		unsupported("implicit on-demand paging (ibv_reg_mr of NULL, SIZE_MAX)")
		return C.EOPNOTSUPP
	}
	if n == 0 {
		return C.EINVAL
	}
	shadowOnce.Do(func() { shadow, shadowErr = pages.Open() })
	if shadowErr != nil {
		fmt.Fprintf(os.Stderr, "softnic: ibv_reg_mr: %v\n", shadowErr)
		return C.ENOMEM
	}
	if err := shadow.Share(a, n); err != nil {
		fmt.Fprintf(os.Stderr, "softnic: ibv_reg_mr of %d bytes at %#x: %v\n", n, a, err)
		return errnoOf(err)
	}
	r, err := p.RegShared(shadow.FD(), int64(a), int(n), uint64(iova), mr.Access(access))
	if err != nil {
		shadow.Unshare(a, n)
		return errnoOf(err)
	}
	m.mr.lkey, m.mr.rkey = C.uint32_t(r.LKey()), C.uint32_t(r.RKey())
	reg := &region{m: r, addr: a, n: n}
	m.h = C.uintptr_t(cgo.NewHandle(reg))
	regions.Lock()
	if regions.byKey == nil {
		regions.byKey = make(map[uint32]*region)
	}
	regions.byKey[r.LKey()] = reg
	regions.Unlock()
	return 0
}

//export snDeregMR
func snDeregMR(m *C.struct_sn_mr) C.int {
	r := handleOf[*region](m.h)
	if err := r.m.Dereg(); err != nil {
		return errnoOf(err)
	}
	regions.Lock()
	if regions.byKey[r.m.LKey()] == r { // not the key's next region's, registered meanwhile
		delete(regions.byKey, r.m.LKey())
	}
	regions.Unlock()
	shadow.Unshare(r.addr, r.n)
	cgo.Handle(m.h).Delete()
	return 0
}

// snReregMR re-registers a region in place (ibv_rereg_mr past
// libibverbs' own checks of its input): pd is the new PD, nil unless flags
// has IBV_REREG_MR_CHANGE_PD. A new address range is refused with
// EOPNOTSUPP, as rxe refuses it.
//
//export snReregMR
func snReregMR(m *C.struct_sn_mr, flags C.int, pd *C.struct_sn_pd, access C.int) C.int {
	if flags&C.IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
		unsupported("ibv_rereg_mr of a new address range (IBV_REREG_MR_CHANGE_TRANSLATION)")
		return C.EOPNOTSUPP
	}
	var p *nic.PD
	if pd != nil {
		p = handleOf[*nic.PD](pd.h)
	}
	r := handleOf[*region](m.h)
	if err := r.m.Rereg(mr.ReregFlags(flags), p, mr.Access(access&^C.IBV_ACCESS_OPTIONAL_RANGE)); err != nil {
		return errnoOf(err)
	}
	m.mr.lkey, m.mr.rkey = C.uint32_t(r.m.LKey()), C.uint32_t(r.m.RKey())
	return 0
}

// snPrefetchMR makes the pages behind an SGE of an on-demand paging
// region of pd resident (ibv_advise_mr's prefetch advices; nic's
// MR.Prefetch). As rxe, the SGE's lkey must name a region of pd (EINVAL
// otherwise), with LOCAL_WRITE and ON_DEMAND, the range in it (EINVAL,
// mr.Table.Prefetch's checks).
//
//export snPrefetchMR
func snPrefetchMR(pd *C.struct_sn_pd, lkey C.uint32_t, addr C.uint64_t, length C.uint32_t) C.int {
	regions.Lock()
	r := regions.byKey[uint32(lkey)]
	regions.Unlock()
	if r == nil || r.m.PD() != handleOf[*nic.PD](pd.h) {
		return C.EINVAL
	}
	return errnoOf(r.m.Prefetch(uint64(addr), int(length)))
}

//export snAllocMW
func snAllocMW(pd *C.struct_sn_pd, w *C.struct_sn_mw, typ C.int) C.int {
	mw, err := handleOf[*nic.PD](pd.h).AllocMW(mr.WindowType(typ))
	if err != nil {
		return errnoOf(err)
	}
	w.mw.rkey = C.uint32_t(mw.RKey())
	w.h = C.uintptr_t(cgo.NewHandle(mw))
	return 0
}

//export snDeallocMW
func snDeallocMW(w *C.struct_sn_mw) C.int {
	if err := handleOf[*nic.MW](w.h).Dealloc(); err != nil {
		return errnoOf(err)
	}
	cgo.Handle(w.h).Delete()
	return 0
}

// cq is the Go side of an ibv_cq.
type cq struct {
	c   *nic.CQ
	cq  *C.struct_sn_cq
	dev *nic.Device

	mu  sync.Mutex
	wcs []verbs.WC // Poll's scratch

	// A CQ made with a completion channel (events.go): its wakeup, in the
	// channel's epoll set, and its arming not delivered yet, if any.
	channel *channel
	wake    nic.Wakeup
	reqMu   sync.Mutex // serialises the armings (snReqNotifyCQ, disarm)
	armMu   sync.Mutex
	arming  *arming
	// destroyed is set, under the channel's lock, once the CQ is
	// destroyed: its events are no longer delivered (channel.purge).
	destroyed bool
}

//export snCreateCQ
func snCreateCQ(ctx *C.struct_ibv_context, c *C.struct_sn_cq, cqe C.int) C.int {
	if cqe <= 0 {
		cqe = 1
	}
	d := deviceOf(ctx).dev
	q, err := d.CreateCQ(int(cqe))
	if err != nil {
		return errnoOf(err)
	}
	(*C.struct_ibv_cq)(unsafe.Pointer(c)).cqe = cqe
	c.h = C.uintptr_t(cgo.NewHandle(&cq{c: q, cq: c, dev: d}))
	return 0
}

// snResizeCQ is ibv_resize_cq: the CQ takes cqe completions, as cq->cqe
// then says.
//
//export snResizeCQ
func snResizeCQ(c *C.struct_sn_cq, cqe C.int) C.int {
	if err := handleOf[*cq](c.h).c.Resize(int(cqe)); err != nil {
		return errnoOf(err)
	}
	(*C.struct_ibv_cq)(unsafe.Pointer(c)).cqe = cqe
	return 0
}

//export snDestroyCQ
func snDestroyCQ(c *C.struct_sn_cq) C.int {
	q := handleOf[*cq](c.h)
	if q.channel != nil {
		q.channel.removeCQ(q)
	}
	if err := q.c.Destroy(); err != nil {
		if q.channel != nil {
			q.channel.restoreCQ(q)
		}
		return errnoOf(err)
	}
	if q.channel != nil {
		q.disarm()
	}
	cgo.Handle(c.h).Delete()
	return 0
}

// snReschedule lets the calling thread's goroutine go through Go's
// scheduler (see sn_data_path in abi/verbs.c).
//
//export snReschedule
func snReschedule() { runtime.Gosched() }

// snPollCQ is ops.poll_cq (ibv_poll_cq): CQ.Poll, which gives up the CPU
// when it finds nothing; the caller naps too once the thread has waited
// long (see sn_poll_cq in abi/verbs.c).
//
//export snPollCQ
func snPollCQ(c *C.struct_ibv_cq, n C.int, wc *C.struct_ibv_wc) C.int {
	if n <= 0 {
		return 0
	}
	q := handleOf[*cq]((*C.struct_sn_cq)(unsafe.Pointer(c)).h)
	q.mu.Lock()
	defer q.mu.Unlock()
	if cap(q.wcs) < int(n) {
		q.wcs = make([]verbs.WC, n)
	}
	got, err := q.c.Poll(q.wcs[:n])
	out := unsafe.Slice(wc, n)
	for i := range got {
		fillWC(&out[i], &q.wcs[i])
	}
	if got == 0 && err != nil {
		return -1
	}
	if got == 0 {
		select {
		case <-q.dev.Done():
			// The daemon is gone: no completion will come.
			return -1
		default:
		}
	}
	return C.int(got)
}

// wcOpcodes maps softnic's completion opcodes to ibv_wc_opcode.
var wcOpcodes = [...]C.enum_ibv_wc_opcode{
	verbs.WCSend: C.IBV_WC_SEND, verbs.WCWrite: C.IBV_WC_RDMA_WRITE, verbs.WCRead: C.IBV_WC_RDMA_READ,
	verbs.WCCompareSwap: C.IBV_WC_COMP_SWAP, verbs.WCFetchAdd: C.IBV_WC_FETCH_ADD, verbs.WCBindMW: C.IBV_WC_BIND_MW,
	verbs.WCLocalInv: C.IBV_WC_LOCAL_INV, verbs.WCAtomicWrite: C.IBV_WC_ATOMIC_WRITE, verbs.WCRecv: C.IBV_WC_RECV,
	verbs.WCRecvWriteImm: C.IBV_WC_RECV_RDMA_WITH_IMM,
}

// fillWC writes w into the program's ibv_wc. The statuses share
// ibv_wc_status's numbering.
func fillWC(out *C.struct_ibv_wc, w *verbs.WC) {
	*out = C.struct_ibv_wc{}
	out.wr_id = C.uint64_t(w.ID)
	out.status = C.enum_ibv_wc_status(w.Status)
	if int(w.Opcode) < len(wcOpcodes) {
		out.opcode = wcOpcodes[w.Opcode]
	}
	out.byte_len = C.uint32_t(w.ByteLen)
	out.qp_num = C.uint32_t(w.QPN)
	out.src_qp = C.uint32_t(w.SrcQPN)
	imm := (*C.uint32_t)(unsafe.Pointer(&out.anon0))
	if w.Flags&verbs.WCWithImm != 0 {
		*imm = C.uint32_t(htobe32(w.Imm))
		out.wc_flags |= C.IBV_WC_WITH_IMM
	}
	if w.Flags&verbs.WCWithInv != 0 {
		*imm = C.uint32_t(w.InvalidatedRKey)
		out.wc_flags |= C.IBV_WC_WITH_INV
	}
	if w.Flags&verbs.WCGRH != 0 {
		out.wc_flags |= C.IBV_WC_GRH
	}
}
