package fabric

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// CQDataSize is the number of bytes of remote CQ data an operation carries
// (fi_domain_attr.cq_data_size): the 32-bit immediate of RDMA WRITE with
// immediate.
const CQDataSize = 4

// RMAIOV is one segment of remote memory (struct kfi_rma_iov).
type RMAIOV struct {
	Addr uint64 // remote address
	Len  uint64 // bytes
	Key  uint64 // the region's rkey (32 bits on RoCE)
}

// RMAMsg describes a ReadMsg or WriteMsg (struct kfi_msg_rma).
type RMAMsg struct {
	// IOV are the local buffers, in order; Desc, if not nil, holds the
	// registered region of each (nil entries are looked up by address).
	IOV  [][]byte
	Desc []*nic.MR
	// RMAIOV are the remote segments; their lengths add up to the local
	// buffers' total.
	RMAIOV []RMAIOV
	// Context comes back in the operation's completion.
	Context any
	// Data is the remote CQ data of a write with FIRemoteCQData.
	Data uint64
}

// Completion is a completion of a fabric-style operation (struct
// kfi_cq_data_entry, with the error of kfi_cq_err_entry folded in).
type Completion struct {
	// Context is the value the operation was posted with; nil for
	// InjectWrite, whose failures still complete.
	Context any
	// Flags say what completed: FIRMA|FIRead, FIRMA|FIWrite, a peer's write
	// with remote CQ data (FIRMA|FIRemoteWrite|FIRemoteCQData), or a
	// received message (FIMsg|FIRecv).
	Flags Flags
	// Len is the number of bytes the operation moved (0 when it failed).
	Len int
	// Data is the remote CQ data of a completion with FIRemoteCQData.
	Data uint64
	// Err is nil on success, else a StatusError.
	Err error
}

// StatusError is the error of a failed completion: the work completion
// status (ibv_wc_status; kfi_cq_err_entry's prov_errno) of the work request
// that failed. Values compare equal, so errors.Is(c.Err,
// StatusError(qp.RemAccessErr)) asks for one status.
type StatusError verbs.WCStatus

func (e StatusError) Error() string {
	s := verbs.WCStatus(e)
	return "operation failed: " + s.String() + " (" + s.Text() + ")"
}

// Status returns the work completion status.
func (e StatusError) Status() verbs.WCStatus { return verbs.WCStatus(e) }

// EndpointConfig configures an Endpoint (the tx and rx attributes of
// kfi_getinfo and the completion mode of kfi_ep_bind). Zero fields take
// the defaults noted.
type EndpointConfig struct {
	// TxSize is how many RMA work requests may be outstanding at once
	// (tx_attr.size), the depth of the QP's send queue; default 256.
	TxSize int
	// RxSize is how many receives may be posted at once (rx_attr.size);
	// default 256.
	RxSize int
	// IOVLimit is the most local buffers one call takes (tx_attr.iov_limit),
	// the QP's max_send_sge; default 4, at most 32.
	IOVLimit int
	// RMAIOVLimit is the most remote segments one ReadMsg or WriteMsg takes
	// (tx_attr.rma_iov_limit); each costs one work request. Default 4, at
	// most TxSize.
	RMAIOVLimit int
	// InjectSize is the most bytes InjectWrite and FIInject take
	// (tx_attr.inject_size), the QP's max_inline_data; default 256, at most
	// 4096. Larger injects fail with ErrInvalid: the data travels inline in
	// the work request, so no bounce buffer has to be registered, sized or
	// waited for.
	InjectSize int
	// SelectiveCompletion is binding the CQ with KFI_COMPLETION
	// (FI_SELECTIVE_COMPLETION in libfabric): only operations posted with
	// FICompletion report success. Without it every operation does, except
	// InjectWrite. Failures are reported either way. It is not the QP's
	// sq_sig_all, which no WR can opt out of: the endpoint signals WR by
	// WR, so that InjectWrite stays silent whatever the mode.
	SelectiveCompletion bool
}

func (c *EndpointConfig) setDefaults() error {
	for _, f := range []struct {
		v    *int
		def  int
		name string
	}{
		{&c.TxSize, 256, "tx size"}, {&c.RxSize, 256, "rx size"}, {&c.IOVLimit, 4, "iov_limit"},
		{&c.RMAIOVLimit, 4, "rma_iov_limit"}, {&c.InjectSize, 256, "inject_size"},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 {
			return fmt.Errorf("endpoint %s %d: %w", f.name, *f.v, ErrInvalid)
		}
	}
	if c.RMAIOVLimit > c.TxSize {
		return fmt.Errorf("endpoint rma_iov_limit %d exceeds the tx size %d: %w", c.RMAIOVLimit, c.TxSize, ErrInvalid)
	}
	return nil
}

// Endpoint is the fabric-style face of an RC QP: a connected endpoint with
// the RMA calls of kfi_rma(3) (fi_rma(3) in libfabric), made of an RC QP and
// the completion queue its sends and receives complete on. Its methods are
// safe for concurrent use. The calls and flags map onto the QP as follows:
//
//	kfi call / flag          softnic
//	kfi_read, kfi_readv      Endpoint.Read, Readv: one RDMA READ
//	kfi_readmsg              Endpoint.ReadMsg: one RDMA READ per remote segment
//	kfi_write, kfi_writev    Endpoint.Write, Writev: one RDMA WRITE
//	kfi_writemsg             Endpoint.WriteMsg: one RDMA WRITE per remote segment
//	kfi_inject_write         Endpoint.InjectWrite: an inline (qp.Inline), unsignaled WRITE
//	kfi_writedata            Endpoint.WriteData: RDMA WRITE with immediate
//	kfi_recv                 Endpoint.Recv: a receive WR (needed for remote CQ data)
//	kfi_cq_read, _sread      Endpoint.Poll, Wait
//	KFI_COMPLETION           qp.Signaled on the message's last WR
//	no KFI_COMPLETION bind   EndpointConfig.SelectiveCompletion false: every call but inject completes
//	KFI_MORE                 QP.PostSendDeferred; the next call without it rings the doorbell
//	KFI_INJECT               qp.Inline: the data is copied at post time
//	KFI_FENCE                qp.Fence on the message's first WR
//	KFI_REMOTE_CQ_DATA       qp.WRWriteImm on the message's last WR, the data as immediate
//	context                  Completion.Context, through a table indexed by wr_id
//	-KFI_EAGAIN              ErrAgain: the send (or receive) queue is full
//	src_addr, dest_addr      none: an RC endpoint is connected, and kfi ignores them then
//
// Every operation is posted as one or more send work requests whose wr_id
// indexes a table of the operations in flight; a completion finds its
// Context there and frees the entry. The table has a slot per send queue
// entry, so it never grows: when it is full a call fails with ErrAgain,
// and completions must be reaped (Poll, Wait) before retrying. An
// operation posted without a completion frees its slot once the QP has
// finished it, without a completion to reap.
//
// Remote CQ data: a write with FIRemoteCQData (WriteData, or WriteMsg with
// the flag) is an RDMA WRITE with immediate. At the target it consumes a
// receive work request and completes it with the data as the immediate, so
// the target must have posted a receive (Recv, with no buffer if it wants
// only the data) on its endpoint; until it does, its QP answers with RNR
// NAKs and the writer retries (rnr_retry times; 7, the default, forever).
// The target's completion has FIRMA|FIRemoteWrite|FIRemoteCQData, Data,
// and Len, the bytes of the WRITE that carried the data: the last segment
// of a WriteMsg, whose earlier segments are plain WRITEs.
//
// FENCE is the IBTA fence of the QP: the fenced operation starts once every
// earlier READ has completed. Earlier WRITEs need no wait: the RC responder
// executes requests in PSN order, so the target sees them before the fenced
// operation, as kfi_rma(3) asks.
type Endpoint struct {
	qp  *nic.QP
	cq  *nic.CQ
	pd  *nic.PD
	cfg EndpointConfig

	mu sync.Mutex
	// tx holds an entry per send WR in flight: wr_id n lives in
	// tx[n%len(tx)]; txHead is the oldest WR not retired, txTail the next
	// wr_id. rx does the same for receive WRs.
	tx             []txEntry
	txHead, txTail uint64
	rx             []rxEntry
	rxHead, rxTail uint64
	// Scratch space, reused under mu so that posting does not allocate.
	locals []verbs.SGE // the local buffers of the call, resolved
	sgl    []verbs.SGE // the SGL of one WR
	inject []byte      // an injected write's data, gathered
	wr     verbs.SendWR
	rwr    verbs.RecvWR
	rsge   [1]verbs.SGE
	wcs    [16]verbs.WC
	// closed: Close destroyed the QP and the CQ; flushed holds the
	// completions it reaped that Poll has not returned yet.
	closed  bool
	flushed []Completion
}

// txEntry is an RMA work request in flight.
type txEntry struct {
	ctx   any
	flags Flags // the completion's flags
	len   int   // bytes of the whole operation
	// signaled: the WR completes on success too (the last WR of an
	// operation that reports success). last: the operation's last WR.
	signaled, last bool
	// silenced: the operation's failure has been reported (or the call
	// that posted it failed); its other WRs complete quietly.
	silenced bool
}

type rxEntry struct{ ctx any }

// NewEndpoint opens an endpoint in pd: a CQ deep enough for every WR it
// can have in flight and an RC QP in the RESET state. Connect it with
// QP().Connect (or the connection manager) before posting.
func NewEndpoint(pd *nic.PD, cfg EndpointConfig) (*Endpoint, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cq, err := pd.Device().CreateCQ(cfg.TxSize + cfg.RxSize)
	if err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	q, err := pd.CreateQP(nic.QPConfig{
		Type: verbs.RC, SendCQ: cq, MaxSendWR: cfg.TxSize, MaxRecvWR: cfg.RxSize,
		MaxSendSGE: cfg.IOVLimit, MaxRecvSGE: 1, MaxInline: cfg.InjectSize,
	})
	if err != nil {
		cq.Destroy()
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	return &Endpoint{
		qp: q, cq: cq, pd: pd, cfg: cfg,
		tx:     make([]txEntry, cfg.TxSize),
		rx:     make([]rxEntry, cfg.RxSize),
		locals: make([]verbs.SGE, 0, cfg.IOVLimit),
		sgl:    make([]verbs.SGE, 0, cfg.IOVLimit),
		inject: make([]byte, cfg.InjectSize),
	}, nil
}

// QP returns the endpoint's QP, to connect it and to look at it. Post only
// through the endpoint: it owns the QP's queues and completions.
func (ep *Endpoint) QP() *nic.QP { return ep.qp }

// isClosed reports whether Close has run.
func (ep *Endpoint) isClosed() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.closed
}

// Config returns the endpoint's configuration with the defaults filled in.
func (ep *Endpoint) Config() EndpointConfig { return ep.cfg }

// Close destroys the QP and its CQ (kfi_close): operations in flight
// complete with WR_FLUSH_ERR, and Poll and Wait return those completions,
// then ErrClosed. Destroying the QP flushes it at once, so Close reaps
// every completion there is and keeps them until polled; the CQ goes now
// rather than when the application has polled them, or never: an attached
// endpoint's CQ holds a ring and descriptors of the daemon. An error of
// the CQ while reaping (overflow, a corrupt ring) is Close's.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return nil
	}
	if err := ep.qp.Destroy(); err != nil {
		return err
	}
	ep.closed = true
	var err error
	for {
		var k int
		k, err = ep.cq.PollOnly(ep.wcs[:])
		for i := range k {
			var c Completion
			if ep.completeLocked(&ep.wcs[i], &c) {
				ep.flushed = append(ep.flushed, c)
			}
		}
		if err != nil || k < len(ep.wcs) {
			break
		}
	}
	if err != nil {
		ep.cq.Destroy()
		return fmt.Errorf("endpoint CQ: %w", err)
	}
	return ep.cq.Destroy()
}

// rmaCall is one fabric-style RMA call.
type rmaCall struct {
	op    verbs.WROpcode // qp.WRRead or qp.WRWrite
	iov   [][]byte
	desc  []*nic.MR
	rma   []RMAIOV
	data  uint64
	flags Flags
	// silent: no completion on success even if the endpoint completes by
	// default (kfi_inject_write).
	silent bool
}

// Read reads len(buf) bytes at addr in the peer's region key into buf
// (kfi_read). desc is buf's registered region, or nil to look it up by
// address; the region needs local write access. Do not touch buf until the
// read completes.
func (ep *Endpoint) Read(buf []byte, desc *nic.MR, addr, key uint64, context any) error {
	iov, descs := [1][]byte{buf}, [1]*nic.MR{desc}
	rma := oneSegment(iov[:], addr, key)
	return ep.post("read", &rmaCall{op: verbs.WRRead, iov: iov[:], desc: descs[:], rma: rma[:]}, context)
}

// Readv reads into the buffers of iov, in order, from consecutive remote
// memory at addr (kfi_readv). desc is nil or holds the region of each
// buffer.
func (ep *Endpoint) Readv(iov [][]byte, desc []*nic.MR, addr, key uint64, context any) error {
	rma := oneSegment(iov, addr, key)
	return ep.post("readv", &rmaCall{op: verbs.WRRead, iov: iov, desc: desc, rma: rma[:]}, context)
}

// ReadMsg reads the remote segments of msg into its local buffers
// (kfi_readmsg), with flags FICompletion, FIMore and FIFence. Each remote
// segment is one RDMA READ; the operation completes once, when the last
// has.
func (ep *Endpoint) ReadMsg(msg *RMAMsg, flags Flags) error {
	if msg == nil {
		return fmt.Errorf("readmsg: no message: %w", ErrInvalid)
	}
	return ep.post("readmsg", &rmaCall{op: verbs.WRRead, iov: msg.IOV, desc: msg.Desc, rma: msg.RMAIOV, data: msg.Data, flags: flags}, msg.Context)
}

// Write writes buf to addr in the peer's region key (kfi_write). desc is
// buf's registered region, or nil to look it up by address. Do not touch
// buf until the write completes.
func (ep *Endpoint) Write(buf []byte, desc *nic.MR, addr, key uint64, context any) error {
	iov, descs := [1][]byte{buf}, [1]*nic.MR{desc}
	rma := oneSegment(iov[:], addr, key)
	return ep.post("write", &rmaCall{op: verbs.WRWrite, iov: iov[:], desc: descs[:], rma: rma[:]}, context)
}

// Writev writes the buffers of iov, in order, to consecutive remote memory
// at addr (kfi_writev).
func (ep *Endpoint) Writev(iov [][]byte, desc []*nic.MR, addr, key uint64, context any) error {
	rma := oneSegment(iov, addr, key)
	return ep.post("writev", &rmaCall{op: verbs.WRWrite, iov: iov, desc: desc, rma: rma[:]}, context)
}

// WriteMsg writes the local buffers of msg to its remote segments
// (kfi_writemsg), with flags FICompletion, FIMore, FIFence, FIInject and
// FIRemoteCQData. Each remote segment is one RDMA WRITE; with remote CQ
// data only the last carries it, so the target completes once per message.
func (ep *Endpoint) WriteMsg(msg *RMAMsg, flags Flags) error {
	if msg == nil {
		return fmt.Errorf("writemsg: no message: %w", ErrInvalid)
	}
	return ep.post("writemsg", &rmaCall{op: verbs.WRWrite, iov: msg.IOV, desc: msg.Desc, rma: msg.RMAIOV, data: msg.Data, flags: flags}, msg.Context)
}

// InjectWrite writes buf to addr in the peer's region key
// (kfi_inject_write): buf may be reused as soon as the call returns, and
// success produces no completion whatever the endpoint's completion mode.
// A failure still completes, with a nil Context. buf needs no registration
// and holds at most InjectSize bytes.
func (ep *Endpoint) InjectWrite(buf []byte, addr, key uint64) error {
	iov := [1][]byte{buf}
	rma := oneSegment(iov[:], addr, key)
	return ep.post("inject_write", &rmaCall{op: verbs.WRWrite, iov: iov[:], rma: rma[:],
		flags: FIInject, silent: true}, nil)
}

// WriteData writes buf like Write and delivers data, as remote CQ data, in
// a completion at the target (kfi_writedata), which must have a receive
// posted (see Endpoint). data has CQDataSize bytes.
func (ep *Endpoint) WriteData(buf []byte, desc *nic.MR, data, addr, key uint64, context any) error {
	iov, descs := [1][]byte{buf}, [1]*nic.MR{desc}
	rma := oneSegment(iov[:], addr, key)
	return ep.post("writedata", &rmaCall{op: verbs.WRWrite, iov: iov[:], desc: descs[:], rma: rma[:], data: data, flags: FIRemoteCQData}, context)
}

// oneSegment is the remote side of the calls that take an address and a
// key: one segment as long as the local buffers together.
func oneSegment(iov [][]byte, addr, key uint64) [1]RMAIOV {
	return [1]RMAIOV{{Addr: addr, Len: iovLen(iov), Key: key}}
}

func iovLen(iov [][]byte) uint64 {
	n := uint64(0)
	for _, b := range iov {
		n += uint64(len(b))
	}
	return n
}

// post validates and posts an RMA call with its context; name is the kfi
// call without its prefix, for errors. A call without FIMore rings the
// doorbell, even when it fails, so that what earlier FIMore calls queued
// leaves; so does a call that fails with ErrAgain, whose retry needs the
// queued work to complete.
func (ep *Endpoint) post(name string, c *rmaCall, ctx any) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	err := ep.postLocked(c, ctx)
	if err == nil {
		return nil
	}
	if c.flags&FIMore == 0 || errors.Is(err, ErrAgain) {
		ep.qp.RingDoorbell() // fails only on a destroyed QP, which err already says
	}
	return fmt.Errorf("%s: %w", name, err)
}

// postLocked posts c. The context and the name are not fields of c: they
// escape (into the table, into errors), and escape analysis would move all
// of c's slices to the heap with them.
func (ep *Endpoint) postLocked(c *rmaCall, ctx any) error {
	allowed := readMsgFlags
	if c.op == verbs.WRWrite {
		allowed = writeMsgFlags
	}
	if bad := c.flags &^ allowed; bad != 0 {
		return fmt.Errorf("flags %v do not apply: %w", bad, ErrInvalid)
	}
	if len(c.iov) > ep.cfg.IOVLimit {
		return fmt.Errorf("%d buffers exceed iov_limit %d: %w", len(c.iov), ep.cfg.IOVLimit, ErrInvalid)
	}
	if c.desc != nil && len(c.desc) != len(c.iov) {
		return fmt.Errorf("%d descriptors for %d buffers: %w", len(c.desc), len(c.iov), ErrInvalid)
	}
	total, rma := iovLen(c.iov), c.rma
	if len(rma) == 0 || len(rma) > ep.cfg.RMAIOVLimit {
		return fmt.Errorf("%d remote segments, rma_iov_limit is %d: %w", len(rma), ep.cfg.RMAIOVLimit, ErrInvalid)
	}
	remote := uint64(0)
	for i := range rma {
		if rma[i].Key > math.MaxUint32 {
			return fmt.Errorf("remote key %#x is wider than 32 bits: %w", rma[i].Key, ErrInvalid)
		}
		if rma[i].Len > qp.MaxMessageSize {
			return fmt.Errorf("remote segment of %d bytes exceeds max_msg_size %d: %w", rma[i].Len, qp.MaxMessageSize, ErrInvalid)
		}
		remote += rma[i].Len
	}
	if remote != total {
		return fmt.Errorf("local buffers hold %d bytes, remote segments %d: %w", total, remote, ErrInvalid)
	}
	cqData := c.flags&FIRemoteCQData != 0
	if cqData && c.data > math.MaxUint32 {
		return fmt.Errorf("remote CQ data %#x exceeds %d bytes: %w", c.data, CQDataSize, ErrInvalid)
	}
	inject := c.flags&FIInject != 0
	if inject && total > uint64(ep.cfg.InjectSize) {
		return fmt.Errorf("%d bytes exceed inject_size %d: %w", total, ep.cfg.InjectSize, ErrInvalid)
	}
	if err := ep.reserveTxLocked(len(rma)); err != nil {
		return err
	}
	if inject {
		n := 0
		for _, b := range c.iov {
			n += copy(ep.inject[n:], b)
		}
	} else if err := ep.resolveLocked(c.iov, c.desc); err != nil {
		return err
	}

	report := !c.silent && (c.flags&FICompletion != 0 || !ep.cfg.SelectiveCompletion)
	flags := FIRMA | FIRead
	if c.op == verbs.WRWrite {
		flags = FIRMA | FIWrite
	}
	first := ep.txTail
	var cur sglCursor
	off := uint64(0)
	for i := range rma {
		last := i == len(rma)-1
		wr := &ep.wr
		*wr = verbs.SendWR{ID: ep.txTail, Opcode: c.op, RemoteAddr: rma[i].Addr, RKey: uint32(rma[i].Key)}
		if inject {
			wr.Flags |= verbs.Inline
			wr.Inline = ep.inject[off : off+rma[i].Len]
		} else {
			ep.sgl = cur.take(ep.locals, rma[i].Len, ep.sgl[:0])
			wr.SGL = ep.sgl
		}
		off += rma[i].Len
		if i == 0 && c.flags&FIFence != 0 {
			wr.Flags |= verbs.Fence
		}
		if last && report {
			wr.Flags |= verbs.Signaled
		}
		if last && cqData {
			wr.Opcode, wr.Imm = verbs.WRWriteImm, uint32(c.data)
		}
		post := ep.qp.PostSendDeferred
		if last && c.flags&FIMore == 0 {
			post = ep.qp.PostSend // rings the doorbell
		}
		if err := post(wr); err != nil {
			// Validation above leaves the QP little to refuse; if it
			// refuses a later segment anyway, the segments already posted
			// still run, but the failed call reports nothing for them.
			for s := first; s != ep.txTail; s++ {
				ep.txAt(s).silenced = true
			}
			if errors.Is(err, ErrNoMem) {
				return fmt.Errorf("%v: %w", err, ErrAgain)
			}
			return err
		}
		*ep.txAt(ep.txTail) = txEntry{ctx: ctx, flags: flags, len: int(total), signaled: last && report, last: last}
		ep.txTail++
	}
	return nil
}

func (ep *Endpoint) txAt(id uint64) *txEntry { return &ep.tx[id%uint64(len(ep.tx))] }
func (ep *Endpoint) rxAt(id uint64) *rxEntry { return &ep.rx[id%uint64(len(ep.rx))] }

// reserveTxLocked makes room for n more send WRs in the table, or returns
// ErrAgain. Unsignaled WRs that the QP has finished are retired here: they
// produce no completion that would retire them.
func (ep *Endpoint) reserveTxLocked(n int) error {
	size := uint64(len(ep.tx))
	if ep.txTail-ep.txHead+uint64(n) <= size {
		return nil
	}
	// The QP's send queue holds the newest SendQueued WRs; every older one
	// has finished, and while the QP is not in the error state, finished
	// successfully (a failure moves it to ERR at once). The failed and
	// signaled ones have a completion on its way to Poll.
	if st := ep.qp.Status(); st.State == verbs.RTS || st.State == verbs.SQD {
		done := ep.txTail - uint64(st.SendQueued)
		for ep.txHead < done && !ep.txAt(ep.txHead).signaled {
			*ep.txAt(ep.txHead) = txEntry{}
			ep.txHead++
		}
	}
	if ep.txTail-ep.txHead+uint64(n) > size {
		return fmt.Errorf("%d operations in flight, tx size %d: reap completions and retry: %w",
			ep.txTail-ep.txHead, size, ErrAgain)
	}
	return nil
}

// resolveLocked turns the call's buffers into SGEs in ep.locals, skipping
// empty ones.
func (ep *Endpoint) resolveLocked(iov [][]byte, desc []*nic.MR) error {
	ep.locals = ep.locals[:0]
	for i, b := range iov {
		if len(b) == 0 {
			continue
		}
		var d *nic.MR
		if desc != nil {
			d = desc[i]
		}
		sge, err := ep.localSGE(b, d)
		if err != nil {
			return fmt.Errorf("buffer %d: %w", i, err)
		}
		ep.locals = append(ep.locals, sge)
	}
	return nil
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// localSGE returns the SGE of buf (not empty) in desc, or, when desc is
// nil, in the region of the endpoint's PD that holds it (fi_mr's desc may
// be omitted when the domain does not require FI_MR_LOCAL; the lookup
// costs a search of the region table).
func (ep *Endpoint) localSGE(buf []byte, desc *nic.MR) (verbs.SGE, error) {
	start, n := addrOf(buf), uint64(len(buf))
	if n > math.MaxUint32 {
		return verbs.SGE{}, fmt.Errorf("%d bytes in one buffer: %w", n, ErrInvalid)
	}
	if desc != nil {
		if desc.PD() != ep.pd {
			return verbs.SGE{}, fmt.Errorf("descriptor of another protection domain: %w", ErrInvalid)
		}
		base := addrOf(desc.Bytes())
		if start < base || start+n > base+uint64(desc.Len()) {
			return verbs.SGE{}, fmt.Errorf("%d bytes at %#x are not inside the descriptor's region (%d bytes at %#x): %w",
				n, start, desc.Len(), base, ErrInvalid)
		}
		return verbs.SGE{Addr: desc.Addr() + (start - base), Length: uint32(n), LKey: desc.LKey()}, nil
	}
	if sge, ok := ep.pd.SGEAt(start, n); ok {
		return sge, nil
	}
	return verbs.SGE{}, fmt.Errorf("%d bytes at %#x lie in no region of the endpoint's protection domain: %w", n, start, ErrInvalid)
}

// sglCursor walks the call's local SGEs, handing each remote segment the
// bytes that belong to it.
type sglCursor struct {
	i   int    // current local SGE
	off uint32 // bytes of it already taken
}

// take appends to sgl the SGEs covering the next n bytes of locals.
func (c *sglCursor) take(locals []verbs.SGE, n uint64, sgl []verbs.SGE) []verbs.SGE {
	for n > 0 && c.i < len(locals) {
		l := &locals[c.i]
		chunk := min(uint64(l.Length-c.off), n)
		sgl = append(sgl, verbs.SGE{Addr: l.Addr + uint64(c.off), Length: uint32(chunk), LKey: l.LKey})
		n -= chunk
		if c.off += uint32(chunk); c.off == l.Length {
			c.i, c.off = c.i+1, 0
		}
	}
	return sgl
}

// Recv posts a receive (kfi_recv): a buffer for a message sent to the
// endpoint, or, with buf empty, a slot for a peer's remote CQ data. desc
// is buf's region or nil (looked up by address); it needs local write
// access. The QP must have left RESET (be connected).
func (ep *Endpoint) Recv(buf []byte, desc *nic.MR, context any) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.rxTail-ep.rxHead == uint64(len(ep.rx)) {
		return fmt.Errorf("recv: %d receives posted, rx size %d: %w", len(ep.rx), len(ep.rx), ErrAgain)
	}
	ep.rwr = verbs.RecvWR{ID: ep.rxTail}
	if len(buf) > 0 {
		sge, err := ep.localSGE(buf, desc)
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		ep.rsge[0] = sge
		ep.rwr.SGL = ep.rsge[:]
	}
	if err := ep.qp.PostRecv(&ep.rwr); err != nil {
		if errors.Is(err, ErrNoMem) {
			return fmt.Errorf("recv: %v: %w", err, ErrAgain)
		}
		return fmt.Errorf("recv: %w", err)
	}
	*ep.rxAt(ep.rxTail) = rxEntry{ctx: context}
	ep.rxTail++
	return nil
}

// Poll moves up to len(out) completions into out without blocking
// (kfi_cq_read) and returns how many. Reaping completions is also what
// frees room for new operations. After Close it returns the flushed
// completions, then ErrClosed. Like nic.CQ.Poll, a Poll that finds nothing
// processes the packets the device has received, on the calling goroutine:
// a caller that polls drives progress, as with libfabric's manual progress.
func (ep *Endpoint) Poll(out []Completion) (int, error) { return ep.poll(out, true) }

// poll is Poll; drive says whether the first poll of the CQ may process
// received packets (nic.CQ.Poll) or not (nic.CQ.PollOnly).
func (ep *Endpoint) poll(out []Completion, drive bool) (int, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return ep.pollFlushedLocked(out)
	}
	n := 0
	for n < len(out) {
		wcs := ep.wcs[:min(len(ep.wcs), len(out)-n)]
		var k int
		var err error
		if drive && n == 0 {
			k, err = ep.cq.Poll(wcs)
		} else {
			k, err = ep.cq.PollOnly(wcs)
		}
		for i := range k {
			if ep.completeLocked(&wcs[i], &out[n]) {
				n++
			}
		}
		if err != nil {
			return n, fmt.Errorf("endpoint CQ: %w", err)
		}
		if k < len(wcs) {
			break
		}
	}
	return n, nil
}

// pollFlushedLocked moves completions that Close reaped into out.
func (ep *Endpoint) pollFlushedLocked(out []Completion) (int, error) {
	if len(ep.flushed) == 0 {
		if len(out) == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("endpoint: %w", ErrClosed)
	}
	n := copy(out, ep.flushed)
	clear(ep.flushed[:n])
	ep.flushed = ep.flushed[n:]
	return n, nil
}

// Wait blocks until at least one completion is available, then polls up to
// len(out) of them (kfi_cq_sread). It returns early with ctx's error, or
// ErrClosed when the device closes, or when the endpoint is closed and its
// flushed completions are all returned; with an empty out it returns at
// once.
func (ep *Endpoint) Wait(ctx context.Context, out []Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	n, err := ep.cq.WaitPoll(ctx, func() (int, error) { return ep.poll(out, false) })
	if errors.Is(err, ErrClosed) {
		// Close may have destroyed the CQ under the wait, after reaping
		// what this wait is for.
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if ep.closed {
			return ep.pollFlushedLocked(out)
		}
	}
	return n, err
}

// completeLocked turns a work completion into out and reports whether the
// user sees it. A send queue completes in posting order, so a completion
// for wr_id n also retires every older WR: those finished without one.
func (ep *Endpoint) completeLocked(wc *verbs.WC, out *Completion) bool {
	if wc.Opcode == verbs.WCRecv || wc.Opcode == verbs.WCRecvWriteImm {
		return ep.completeRecvLocked(wc, out)
	}
	id := wc.ID
	if id < ep.txHead || id >= ep.txTail {
		return false // not the endpoint's: the QP was posted to directly
	}
	for ; ep.txHead < id; ep.txHead++ {
		*ep.txAt(ep.txHead) = txEntry{}
	}
	e := *ep.txAt(id)
	*ep.txAt(id) = txEntry{}
	ep.txHead++
	if e.silenced || (wc.Status == verbs.Success && !e.signaled) {
		return false
	}
	*out = Completion{Context: e.ctx, Flags: e.flags}
	if wc.Status == verbs.Success {
		out.Len = e.len
		return true
	}
	out.Err = StatusError(wc.Status)
	// One failure per operation: the rest of its WRs are flushed.
	for s := id + 1; !e.last && s < ep.txTail; s++ {
		next := ep.txAt(s)
		next.silenced = true
		e.last = next.last
	}
	return true
}

func (ep *Endpoint) completeRecvLocked(wc *verbs.WC, out *Completion) bool {
	id := wc.ID
	if id < ep.rxHead || id >= ep.rxTail {
		return false
	}
	for ; ep.rxHead < id; ep.rxHead++ {
		*ep.rxAt(ep.rxHead) = rxEntry{}
	}
	e := *ep.rxAt(id)
	*ep.rxAt(id) = rxEntry{}
	ep.rxHead++
	*out = Completion{Context: e.ctx, Flags: FIMsg | FIRecv}
	if wc.Opcode == verbs.WCRecvWriteImm {
		out.Flags = FIRMA | FIRemoteWrite
	}
	if wc.Status != verbs.Success {
		out.Err = StatusError(wc.Status)
		return true
	}
	out.Len = int(wc.ByteLen)
	if wc.Flags&verbs.WCWithImm != 0 {
		out.Flags |= FIRemoteCQData
		out.Data = uint64(wc.Imm)
	}
	return true
}
