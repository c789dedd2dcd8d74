package embedded

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/cmhost"
	"github.com/softnic/softnic/nic/internal/guard"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/internal/route"
	"github.com/softnic/softnic/nic/internal/timers"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The embedded provider's device: the NIC run in this process, its UDP
// socket, region table, QP table and counters, and what it does with each
// packet it receives.

// Device is the embedded provider: the NIC run in this process.
type Device struct {
	up    provider.Up
	cfg   Config
	log   *slog.Logger
	conn  *udp.Conn
	local netip.AddrPort
	// classes says whether the socket sends each datagram's traffic class
	// (udp.Features.TrafficClass); where it does not, every packet leaves,
	// and is traced, with class 0.
	classes bool
	// classesRead is set once the socket reports each datagram's traffic
	// class (see readClasses).
	classesRead atomic.Bool
	mem         *mr.Table
	epoch       time.Time

	qpc   verbs.Counters
	devc  DevCounters
	guard guard.Guard // holds back sources that fail too many R_Key checks

	qpMu    sync.Mutex // QP number allocation
	qps     []atomic.Pointer[QP]
	nextQPN uint32

	// routes holds, per peer address, our source address toward it and the
	// path MTU; bounded.
	routes route.Table

	faults faultState // the fault injector of Config.Faults or SetFaults

	timers  timers.Queue[wakeup]
	silence silence // of peers that stop answering: see QP.tick
	batches sync.Pool
	prog    progress

	cm *cmhost.Host // the connection manager and its QP1

	groups groups // the multicast groups its QPs are attached to (mcast.go)

	// poller, in a daemon that busy-polls, serves the attached processes
	// whose queues its reader polls too.
	poller atomic.Pointer[busyPollHook]

	closeOnce sync.Once
	closing   chan struct{} // closed by Close
	wg        sync.WaitGroup
}

// Open creates an embedded device and starts its goroutines; up is the
// façade that wraps its QPs.
func Open(cfg Config, up provider.Up) (provider.Device, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 4096
	}
	if cfg.MTU != 256 && cfg.MTU != 512 && cfg.MTU != 1024 && cfg.MTU != 2048 && cfg.MTU != 4096 {
		return nil, fmt.Errorf("softnic: MTU %d is not 256, 512, 1024, 2048 or 4096: %w", cfg.MTU, mr.ErrInvalid)
	}
	if cfg.MaxQPs == 0 {
		cfg.MaxQPs = 1 << 14
	}
	if cfg.MaxQPs < 2 || cfg.MaxQPs > 1<<20 {
		return nil, fmt.Errorf("softnic: MaxQPs %d: %w", cfg.MaxQPs, mr.ErrInvalid)
	}
	if err := cfg.CM.Check(); err != nil {
		return nil, fmt.Errorf("softnic: %w", err)
	}
	cfg.CM = cfg.CM.WithDefaults()
	if cfg.BusyPoll < 0 || cfg.BusyPoll > time.Second {
		return nil, fmt.Errorf("softnic: BusyPoll %v is not within 0 and 1s: %w", cfg.BusyPoll, mr.ErrInvalid)
	}
	if cfg.WaitSpin == 0 {
		cfg.WaitSpin = DefaultWaitSpin
	}
	// A trace shows the traffic class each packet came with; else the
	// kernel is asked for it only once a UD QP needs it (readClasses): it
	// costs a control message per read datagram (a small datagram's send
	// and busy-polled read on loopback: 4.51 against 4.38 µs, 2-CPU VM).
	cfg.UDP.TrafficClass = cfg.UDP.TrafficClass || cfg.Trace != nil
	conn, err := udp.Listen(cfg.Addr, cfg.UDP)
	if err != nil {
		return nil, fmt.Errorf("softnic: listen on %v: %w", cfg.Addr, err)
	}
	d := &Device{
		up:      up,
		cfg:     cfg,
		log:     cfg.Logger,
		conn:    conn,
		local:   conn.LocalAddr(),
		classes: conn.Features().TrafficClass,
		mem:     mr.NewTable(mr.Config{Logger: cfg.Logger}),
		epoch:   time.Now(),
		qps:     make([]atomic.Pointer[QP], cfg.MaxQPs),
		nextQPN: firstQPN,
		closing: make(chan struct{}),
	}
	d.classesRead.Store(cfg.UDP.TrafficClass)
	if cfg.Faults != nil && cfg.Faults.Enabled() {
		d.faults.set(netem.NewInjector(*cfg.Faults))
	}
	d.batches.New = func() any { return newBatch() }
	d.timers.Init()
	d.routes.Init(d.local.Addr(), cfg.MTU)
	access := cfg.Access
	access.Now, access.Source, access.OnHold = d.now, d.guardSource, func() { d.devc.Inc(AccessHolds) }
	d.guard.Init(access)
	d.prog.init(conn.Features().GRO)
	if d.cm, err = newCM(d); err != nil {
		conn.Close()
		d.mem.Close()
		return nil, fmt.Errorf("softnic: QP1: %w", err)
	}
	d.log.Info("softnic device open", slog.Any("addr", d.local), slog.Int("mtu", cfg.MTU),
		slog.Any("udp", conn.Features()), slog.Bool("faults", d.faults.on.Load()))
	d.wg.Add(2)
	go d.readLoop()
	go d.timerLoop()
	return d, nil
}

// firstQPN is the first QP number handed out: 0 and 1 are the IBTA's SMI
// and GSI QPs, and rxe starts its own at 0x11.
const firstQPN = 0x11

func (d *Device) Addr() netip.AddrPort   { return d.local }
func (d *Device) Done() <-chan struct{}  { return d.closing }
func (d *Device) MTU() int               { return d.cfg.MTU }
func (d *Device) MaxQPs() int            { return len(d.qps) }
func (d *Device) Memory() *mr.Table      { return d.mem }
func (d *Device) Features() udp.Features { return d.conn.Features() }

// now is the device clock the QPs' timers run on.
func (d *Device) now() qp.Time { return qp.Time(time.Since(d.epoch)) }

func (d *Device) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.cm.Shutdown()
		close(d.closing)
		d.groups.close()
		for i := range d.qps {
			if q := d.qps[i].Load(); q != nil {
				q.Destroy()
			}
		}
		err = d.conn.Close()
		d.wg.Wait()
		if cerr := d.mem.Close(); err == nil {
			err = cerr
		}
		d.log.Info("softnic device closed", slog.Any("addr", d.local))
	})
	return err
}

func (d *Device) closed() bool {
	select {
	case <-d.closing:
		return true
	default:
		return false
	}
}

// lookup returns the QP numbered qpn, or nil.
func (d *Device) lookup(qpn uint32) *QP {
	q := d.qps[qpn%uint32(len(d.qps))].Load()
	if q == nil || q.num != qpn {
		return nil
	}
	return q
}

// QPs returns every QP, QP1 included, in QP number order.
func (d *Device) QPs() []provider.QP {
	var qps []provider.QP
	for i := range d.qps {
		if q := d.qps[i].Load(); q != nil {
			qps = append(qps, q)
		}
	}
	slices.SortFunc(qps, func(a, b provider.QP) int { return cmp.Compare(a.Num(), b.Num()) })
	return qps
}

// sourceFor returns the address the device sends from toward dst: the
// bound address, or for a wildcard bind the address the kernel routes
// from (see route). The ICRC covers it, so it must be exactly what the
// kernel will put on the wire.
func (d *Device) sourceFor(dst netip.AddrPort) netip.AddrPort {
	if !d.local.Addr().IsUnspecified() {
		return d.local
	}
	return netip.AddrPortFrom(d.routes.Get(dst.Addr()).Src, d.local.Port())
}

// readClasses has the socket report each datagram's traffic class from
// the first UD QP on, so that a UD receive's GRH carries the class its
// datagram came with, as rxe's does (ibv_init_ah_from_wc answers with
// it). Connected QPs need no class of what they receive: a device with
// none but them is spared the cost.
func (d *Device) readClasses() {
	if !d.classesRead.CompareAndSwap(false, true) {
		return
	}
	if err := d.conn.ReadTrafficClass(); err != nil {
		d.log.Warn("softnic: the socket does not tell the traffic class of the datagrams it reads: UD receives see class 0",
			slog.Any("error", err))
	}
}

// receive checks one datagram, which came with traffic class tclass, and
// hands it to its QP.
func (d *Device) receive(b []byte, src, dst netip.AddrPort, tclass uint8, now qp.Time, in *inbound) {
	env := wire.Envelope{Src: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Dst: dst, TrafficClass: tclass}
	verdict := ""
	defer func() {
		if d.cfg.Trace != nil {
			d.cfg.Trace(&TracePacket{Time: time.Now(), Dir: Received, Env: env, Data: b, Note: verdict})
		}
	}()
	if err := env.Check(b); err != nil {
		// Not with identification 0: with the one the packet carries, if
		// the socket saw it (udp.Options.IPIDs); else, with RecoverIPID,
		// with the one the ICRC points at.
		id, seen, ok := d.conn.IPIDOf(src, b, func(id uint16) bool {
			e := env
			e.IPID = id
			return e.Check(b) == nil
		})
		switch {
		case ok:
			d.devc.Inc(ICRCIPIDVerified)
		case !seen && d.cfg.RecoverIPID:
			if id, ok = env.RecoverIPID(b); ok {
				d.devc.Inc(ICRCIPIDRecovered)
			}
		}
		if !ok {
			d.devc.Inc(BadICRC)
			verdict = "dropped: bad ICRC"
			return
		}
		env.IPID = id
	}
	if err := in.pkt.Decode(b); err != nil {
		d.devc.Inc(Malformed)
		verdict = "dropped: " + err.Error()
		return
	}
	if in.pkt.BTH.DestQP() == wire.MulticastQPN {
		d.countReceived(len(b), now)
		verdict = d.receiveMulticast(&env, now, in)
		return
	}
	q := d.lookup(in.pkt.BTH.DestQP())
	if q == nil {
		d.devc.Inc(UnknownQP)
		verdict = "dropped: no such QP"
		return
	}
	if !d.fromOwnPort(q, env.Src) {
		d.qpc.Add(verbs.WrongSource, 1)
		verdict = "dropped: not from the QP its receiver is connected to"
		return
	}
	d.countReceived(len(b), now)
	d.deliver(q, &env, now, in)
}

// countReceived counts a packet of n bytes that reaches a QP.
func (d *Device) countReceived(n int, now qp.Time) {
	d.qpc.Add(verbs.RcvdPkts, 1)
	d.qpc.Add(verbs.RcvdBytes, uint64(n))
	d.silence.heard.Store(int64(now))
}

// deliver hands the packet in in.pkt, of envelope env, to q.
func (d *Device) deliver(q *QP, env *wire.Envelope, now qp.Time, in *inbound) {
	q.mu.Lock()
	if !q.destroyed {
		if q.queues != nil {
			q.queues.PullRecvLocked()
		}
		q.qp.Receive(&in.pkt, env, now)
		if q.commEst != nil && q.qp.Status().ExpectedPSN != q.commEstPSN {
			f := q.commEst
			q.commEst = nil
			f()
		}
	}
	q.mu.Unlock()
	if !q.dirty {
		q.dirty = true
		in.dirty = append(in.dirty, q)
	}
}

func (d *Device) Counters() []verbs.CounterValue {
	var out []verbs.CounterValue
	d.qpc.Each(func(name string, v uint64) { out = append(out, verbs.CounterValue{Name: name, Value: v}) })
	d.devc.Each(func(name string, v uint64) { out = append(out, verbs.CounterValue{Name: name, Value: v}) })
	return out
}

func (d *Device) Query() verbs.DeviceAttr {
	guid := cm.GUID(d.local)
	maxQP := d.MaxQPs() - 1 // QP1, the connection manager's, holds one
	return verbs.DeviceAttr{
		FWVer:           "softnic",
		NodeGUID:        guid,
		SysImageGUID:    guid,
		MaxMRSize:       mr.MaxRegionSize,
		PageSizeCap:     uint64(os.Getpagesize()),
		VendorID:        0xffffff, // none assigned, as rxe's
		MaxQP:           maxQP,
		MaxQPWR:         qp.MaxQPWR,
		Caps:            verbs.CapSysImageGUID | verbs.CapRCRNRNakGen | verbs.CapSRQResize | verbs.CapMemWindow | verbs.CapMemWindowType2,
		MaxSGE:          qp.MaxSGE,
		MaxSGERd:        qp.MaxSGE,
		MaxCQ:           math.MaxInt32,
		MaxCQE:          qp.MaxCQE,
		MaxMR:           mr.MaxKeys,
		MaxPD:           math.MaxInt32,
		MaxQPRdAtom:     qp.MaxRdAtomicLimit,
		MaxQPInitRdAtom: qp.MaxRdAtomicLimit,
		MaxResRdAtom:    qp.MaxRdAtomicLimit * maxQP,
		// What rxe reports, and all a program may count on: atomic among
		// the device's own atomics.
		AtomicCap:             verbs.AtomicHCA,
		MaxMW:                 mr.MaxKeys,
		MaxSRQ:                math.MaxInt32,
		MaxSRQWR:              qp.MaxSRQWR,
		MaxSRQSGE:             qp.MaxSGE,
		MaxPKeys:              1,
		MaxMcastGrp:           MaxMcastGroups,
		MaxMcastQPAttach:      MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxMcastGroups * MaxMcastQPAttach,
		LocalCAAckDelay:       15, // rxe's
		PhysPortCnt:           1,
	}
}

func (d *Device) PathMTU(dst netip.AddrPort) int { return d.routes.Get(dst.Addr()).MTU }

// pathTooBig handles the kernel's EMSGSIZE for a packet of q to dst: the
// route carries less than q's path MTU (a route's MTU changed, or an ICMP
// "fragmentation needed" came). It counts it, lowers the path MTU the
// device uses toward dst for new connections (to what the kernel now says
// the route carries, or one step below q's), and fails a connected q at
// once (its work requests complete with WR_FLUSH_ERR) rather than let it
// send the packet again until its retries run out. q.mu is held.
func (d *Device) pathTooBig(q *QP, dst netip.AddrPort) {
	d.devc.Inc(PathMTUExceeded)
	qpMTU := q.qp.Attr().PathMTU
	if qpMTU == 0 || q.qp.Type() == verbs.UD {
		qpMTU = d.cfg.MTU // a UD QP's datagrams are at most the device's MTU
	}
	old := d.routes.Get(dst.Addr())
	r := d.routes.Probe(dst.Addr().Unmap())
	if r.MTU >= qpMTU {
		r.MTU = max(qpMTU/2, wire.MTU256.Bytes())
	}
	r.MTU = min(r.MTU, old.MTU)
	d.routes.Store(dst.Addr().Unmap(), r)
	if r.MTU < old.MTU {
		d.log.Warn("softnic: the route to a peer carries less than a QP's path MTU: new connections use the smaller MTU",
			slog.Any("peer", dst), slog.String("qpn", fmt.Sprintf("%#x", q.num)), slog.Int("qp_mtu", qpMTU), slog.Int("path_mtu", r.MTU))
	}
	if t := q.qp.Type(); t == verbs.RC || t == verbs.UC {
		q.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	}
}

// isMsgSize reports whether err is the kernel's EMSGSIZE.
func isMsgSize(err error) bool { return errors.Is(err, syscall.EMSGSIZE) }
