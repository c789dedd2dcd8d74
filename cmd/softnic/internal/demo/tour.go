// Package demo is softnic demo: the tour of two NICs in one process on
// loopback, step by step (registration, connection, WRITE, READ, atomics,
// SEND, WRITE WITH IMMEDIATE, a bad rkey, disconnection), each explained
// and checked, or one of package scenario's stories, with every packet
// printed as it leaves its sender, captured and drawn as a ladder on
// request.
package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/softnic/softnic/cmd/softnic/internal/capture"
	"github.com/softnic/softnic/cmd/softnic/internal/decode"
	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/cmd/softnic/internal/scenario"
	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The demo's memory: the server's region, and where in it each step works.
const (
	demoRegionSize = 8 << 10
	WriteLen       = 2500 // more than one packet at MTU 1024 and below
	demoWordOff    = 4096 // the 8-byte word of the atomics
	demoImmOff     = 6144 // where the WRITE WITH IMMEDIATE writes
	demoImm        = 0x00C0FFEE
)

// Options are softnic demo's flags.
type Options struct {
	MTU    int
	CMPort uint16 // the rdma_cm port the server listens on
	Pcap   string // also capture the packets to this file
	HTML   string // also write their ladder's page to this file
	// Step, if set, is read for a line (Enter) before each step after the
	// first (--step).
	Step io.Reader
}

// pause returns what waits before each step after the first, given the
// printer to say what it waits for; nil if nothing waits.
func (o *Options) pause() func(*printer) error {
	if o.Step == nil {
		return nil
	}
	return waitForEnter(o.Step)
}

// waitForEnter returns a pause that waits for a line on in.
func waitForEnter(in io.Reader) func(*printer) error {
	r := bufio.NewReader(in)
	return func(out *printer) error {
		out.say("(press Enter for the next step)")
		if _, err := r.ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for Enter: standard input: %w", err)
		}
		return nil
	}
}

// Scenario runs one scenario (package scenario) with the demo's output:
// its packets printed as they leave, captured with --pcap, its ladder
// written with --html.
func Scenario(ctx context.Context, w io.Writer, s *scenario.Scenario, o *Options) (err error) {
	out := newPrinter(w)
	trace, pcap, err := o.capture(out)
	if err != nil {
		return err
	}
	so := scenario.Options{MTU: o.MTU, Open: openDemoNICs, Say: out.say, Trace: trace}
	if pause := o.pause(); pause != nil {
		so.Pause = func() error { return pause(out) }
	}
	l, err := s.Run(ctx, so)
	if pcap != nil {
		err = errors.Join(err, pcap.Close())
	}
	if l == nil { // the devices did not open
		return errors.Join(err, out.Err())
	}
	if pcap != nil {
		out.say(fmt.Sprintf("\nThe packets are in %s: softnic decode --ladder %s draws them again.", o.Pcap, o.Pcap))
	}
	if o.HTML != "" {
		err = errors.Join(err, decode.WriteLadderPage(o.HTML, l, "softnic demo --scenario "+s.Name+": "+s.Title))
	}
	return errors.Join(err, out.Err())
}

// capture returns the trace that prints packets to out and, with --pcap,
// captures them too, with the capture to close.
func (o *Options) capture(out *printer) (func(*nic.TracePacket), *capture.File, error) {
	if o.Pcap == "" {
		return out.trace, nil, nil
	}
	c, err := capture.Create(o.Pcap)
	if err != nil {
		return nil, nil, err
	}
	return capture.Tee(out.trace, c.Trace()), c, nil
}

// demo is the state of a demo run: a server NIC hosting a region and a
// client NIC that operates on it through one RC connection.
type demo struct {
	ctx    context.Context
	out    *printer
	mtu    int
	cmPort uint16

	server, client *nic.Device
	spd, cpd       *nic.PD
	scq, ccq       *nic.CQ
	region         *nic.MR // the server's
	local          *nic.MR // the client's buffer
	sconn, cconn   *nic.Conn
	remote         announcement // the region as the REP announced it

	message []byte        // what the WRITE writes
	sent    int           // packets sent by both NICs
	naks    int           // remote access error NAKs sent
	dreps   chan struct{} // a DisconnectReply was delivered
}

// announcement is the REP private data of the demo's server: where the
// client may operate, as rdma_cm applications commonly tell their peers.
type announcement struct {
	Addr uint64
	Len  uint32
	RKey uint32
}

func (a *announcement) marshal() []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(
		binary.BigEndian.AppendUint64(nil, a.Addr), a.Len), a.RKey)
}

func (a *announcement) unmarshal(b []byte) error {
	if len(b) < 16 {
		return fmt.Errorf("REP private data of %d bytes, want 16", len(b))
	}
	a.Addr, a.Len, a.RKey = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	return nil
}

// demoStep is one step: a sentence for the reader, then the operation,
// which checks its outcome and says what it saw.
type demoStep struct {
	title   string
	explain func(d *demo) string
	run     func(d *demo) (string, error)
}

var demoSteps = []demoStep{
	{"register memory", (*demo).explainRegister, (*demo).register},
	{"connect", (*demo).explainConnect, (*demo).connect},
	{"RDMA WRITE", (*demo).explainWrite, (*demo).write},
	{"RDMA READ", (*demo).explainRead, (*demo).read},
	{"ATOMIC FETCH_ADD", (*demo).explainFetchAdd, (*demo).fetchAdd},
	{"ATOMIC COMPARE_SWAP", (*demo).explainCompareSwap, (*demo).compareSwap},
	{"SEND / RECV", (*demo).explainSend, (*demo).send},
	{"RDMA WRITE WITH IMMEDIATE", (*demo).explainWriteImm, (*demo).writeImm},
	{"a bad rkey", (*demo).explainBadRKey, (*demo).badRKey},
	{"disconnect", (*demo).explainDisconnect, (*demo).disconnect},
}

// Tour runs the tour: every step, printing as it goes, and fails with the first
// step that did not behave as expected.
func Tour(ctx context.Context, w io.Writer, o *Options) (err error) {
	d := &demo{ctx: ctx, out: newPrinter(w), mtu: o.MTU, cmPort: o.CMPort, dreps: make(chan struct{}, 1)}
	d.out.seen = d.seen
	trace, pcap, err := o.capture(d.out)
	if err != nil {
		return err
	}
	var rec *ladder.Recorder
	if o.HTML != "" {
		rec = ladder.NewRecorder(ladder.New(ladder.Options{}), false)
		trace = capture.Tee(trace, rec.Trace)
	}
	defer func() {
		d.close()
		if pcap != nil {
			err = errors.Join(err, pcap.Close())
			if err == nil {
				sent, _ := d.counts()
				sp, cp := d.server.Addr().Port(), d.client.Addr().Port()
				if sp == wire.UDPPort && cp == wire.UDPPort {
					d.out.say(fmt.Sprintf("\nThe %d packets are in %s: open it in Wireshark, or run softnic decode %s.", sent, o.Pcap, o.Pcap))
				} else {
					d.out.say(fmt.Sprintf("\nThe %d packets are in %s. The NICs used UDP ports %d and %d rather than RoCEv2's 4791, "+
						"so tell Wireshark to decode those ports as InfiniBand (Analyze > Decode As), or run:\n"+
						"  tshark -r %s -d udp.port==%d,infiniband -d udp.port==%d,infiniband\n"+
						"softnic decode %s finds them by their ICRC.", sent, o.Pcap, sp, cp, o.Pcap, sp, cp, o.Pcap))
				}
			}
		}
		if rec != nil && d.server != nil {
			rec.Do(func(l *ladder.Ladder) { err = errors.Join(err, decode.WriteLadderPage(o.HTML, l, "softnic demo")) })
		}
		err = errors.Join(err, d.out.Err())
	}()
	cfg := nic.Config{MTU: o.MTU, Trace: trace}
	if d.server, d.client, err = openDemoNICs(cfg, cfg); err != nil {
		return err
	}
	d.out.say(fmt.Sprintf("softnic demo: two RoCEv2 NICs in one process, on loopback, with a path MTU of %d bytes:\n"+
		"the server at %v and the client at %v. Every packet is printed as it leaves its sender,\n"+
		"in the format of softnic decode: time, source → destination, transport and opcode, QP, PSN, headers, payload, ICRC.",
		o.MTU, d.server.Addr(), d.client.Addr()))
	pause := o.pause()
	for i, s := range demoSteps {
		if i > 0 && pause != nil {
			if err := pause(d.out); err != nil {
				return err
			}
		}
		d.out.say(fmt.Sprintf("\n== %d. %s\n%s", i+1, s.title, s.explain(d)))
		result, err := s.run(d)
		if err != nil {
			d.out.say("FAILED: " + err.Error())
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, err)
		}
		d.out.say("ok: " + result)
	}
	d.close() // the last packets are printed before the verdict
	d.out.say(fmt.Sprintf("\nAll %d steps behaved as expected.", len(demoSteps)))
	return nil
}

// seen is told of every packet the NICs send and receive: it counts the
// packets and the NAKs that refuse an access, and signals the delivery of
// a DisconnectReply.
func (d *demo) seen(tp *nic.TracePacket, p *wire.Packet) {
	if tp.Dir == nic.Sent {
		d.sent++
		if p.AETH != nil && p.AETH.Syndrome() == wire.NakSyndrome(wire.NakRemoteAccessError) {
			d.naks++
		}
		return
	}
	var m mad.MAD
	if tp.Note == "" && p.DETH != nil && p.BTH.DestQP() == wire.GSIQPN && m.Decode(p.Payload) == nil &&
		m.AttrID() == mad.AttrDisconnectReply {
		select {
		case d.dreps <- struct{}{}:
		default:
		}
	}
}

// counts returns the packet counts, which the printer's goroutines update.
func (d *demo) counts() (sent, naks int) {
	d.out.mu.Lock()
	defer d.out.mu.Unlock()
	return d.sent, d.naks
}

// close closes both NICs, once they are open; it may be called again.
func (d *demo) close() {
	for _, dev := range []*nic.Device{d.client, d.server} {
		if dev != nil {
			dev.Close()
		}
	}
}

// syncServer orders the demo's own accesses to the server's region with
// the server NIC's: the NIC touches memory only under the QP's lock, which
// Status takes. (A one-sided operation gives the target's CPU no
// completion to synchronise with.)
func (d *demo) syncServer() { d.sconn.QP().Status() }

func (d *demo) word() uint64 {
	d.syncServer()
	return binary.NativeEndian.Uint64(d.region.Bytes()[demoWordOff:])
}

// post posts wr on the client's QP, signalled, and waits for its
// completion.
func (d *demo) post(wr *verbs.SendWR) (verbs.WC, error) {
	return scenario.Post(d.ctx, d.cconn.QP(), d.ccq, wr)
}

// postOK is post for an operation that must succeed.
func (d *demo) postOK(wr *verbs.SendWR) (verbs.WC, error) {
	return scenario.PostOK(d.ctx, d.cconn.QP(), d.ccq, wr)
}

func (d *demo) wait(cq *nic.CQ, what string) (verbs.WC, error) { return scenario.Wait(d.ctx, cq, what) }

func (d *demo) explainRegister() string {
	return fmt.Sprintf("The server registers %d bytes of memory for remote read, write and atomic access; "+
		"its NIC returns an rkey, the key a peer must present to touch them.", demoRegionSize)
}

func (d *demo) register() (string, error) {
	var err error
	if d.spd, err = d.server.AllocPD(); err != nil {
		return "", err
	}
	if d.region, err = d.spd.AllocMR(demoRegionSize, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite|mr.RemoteAtomic); err != nil {
		return "", err
	}
	if d.scq, err = d.server.CreateCQ(16); err != nil {
		return "", err
	}
	if d.cpd, err = d.client.AllocPD(); err != nil {
		return "", err
	}
	if d.local, err = d.cpd.RegMR(make([]byte, demoRegionSize), mr.LocalWrite); err != nil {
		return "", err
	}
	if d.ccq, err = d.client.CreateCQ(16); err != nil {
		return "", err
	}
	return fmt.Sprintf("the region is at %#x, rkey %#x; no packet is sent to register memory.", d.region.Addr(), d.region.RKey()), nil
}

func (d *demo) explainConnect() string {
	return fmt.Sprintf("The client connects a reliable-connected (RC) queue pair to the server's rdma_cm port %d "+
		"through the connection manager, whose REQ, REP and RTU messages travel as MADs to QP 1; "+
		"the REP's private data tells the client the region's address, length and rkey.", d.cmPort)
}

func (d *demo) connect() (string, error) {
	ctx, cancel := context.WithTimeout(d.ctx, scenario.StepTimeout)
	defer cancel()
	l, err := d.server.Listen(d.cmPort, nic.ListenOptions{PD: d.spd, QP: nic.QPConfig{SendCQ: d.scq}})
	if err != nil {
		return "", err
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		req, err := l.AcceptRequest(ctx)
		if err == nil {
			a := announcement{Addr: d.region.Addr(), Len: uint32(d.region.Len()), RKey: d.region.RKey()}
			d.sconn, err = req.Accept(nic.AcceptOptions{PrivateData: a.marshal()})
		}
		accepted <- err
	}()
	d.cconn, err = d.client.Dial(ctx, d.server.Addr(), d.cmPort, nic.DialOptions{PD: d.cpd, QP: nic.QPConfig{SendCQ: d.ccq}})
	if aerr := <-accepted; err == nil {
		err = aerr
	}
	if err != nil {
		return "", err
	}
	if err := d.remote.unmarshal(d.cconn.PrivateData()); err != nil {
		return "", err
	}
	want := announcement{Addr: d.region.Addr(), Len: uint32(d.region.Len()), RKey: d.region.RKey()}
	if d.remote != want {
		return "", fmt.Errorf("the REP announced %+v, the server sent %+v", d.remote, want)
	}
	if st := d.cconn.QP().Status().State; st != verbs.RTS {
		return "", fmt.Errorf("the client's QP is in state %v, want RTS", st)
	}
	return fmt.Sprintf("client QP %#x is connected to server QP %#x, both in RTS.", d.cconn.QP().Num(), d.sconn.QP().Num()), nil
}

// packets says how many packets of at most the MTU carry n bytes: "3
// packets".
func (d *demo) packets(n int, what string) string {
	k := (n + d.mtu - 1) / d.mtu
	return fmt.Sprintf("%d %s", k, decode.Plural(k, what, what+"s"))
}

func (d *demo) explainWrite() string {
	return fmt.Sprintf("The client writes %d bytes into the server's region with an RDMA WRITE, which the server's NIC "+
		"carries out without its CPU: %s of at most %d bytes, then one ACK.", WriteLen, d.packets(WriteLen, "packet"), d.mtu)
}

func (d *demo) write() (string, error) {
	line := "softnic demo: this text crossed the wire in an RDMA WRITE. "
	d.message = []byte(strings.Repeat(line, WriteLen/len(line)+1)[:WriteLen])
	copy(d.local.Bytes(), d.message)
	if _, err := d.postOK(&verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{d.local.SGE(0, WriteLen)},
		RemoteAddr: d.remote.Addr, RKey: d.remote.RKey}); err != nil {
		return "", err
	}
	d.syncServer()
	if !bytes.Equal(d.region.Bytes()[:WriteLen], d.message) {
		return "", errors.New("the server's memory does not hold what the client wrote")
	}
	return fmt.Sprintf("the server's memory holds the %d bytes: %q...", WriteLen, d.message[:24]), nil
}

func (d *demo) explainRead() string {
	return fmt.Sprintf("The client reads the %d bytes back into another part of its buffer with an RDMA READ: one request, "+
		"answered by %s carrying the data.", WriteLen, d.packets(WriteLen, "READ RESPONSE packet"))
}

func (d *demo) read() (string, error) {
	const off = WriteLen
	if _, err := d.postOK(&verbs.SendWR{Opcode: verbs.WRRead, SGL: []verbs.SGE{d.local.SGE(off, WriteLen)},
		RemoteAddr: d.remote.Addr, RKey: d.remote.RKey}); err != nil {
		return "", err
	}
	if !bytes.Equal(d.local.Bytes()[off:off+WriteLen], d.message) {
		return "", errors.New("the bytes read differ from the bytes written")
	}
	return fmt.Sprintf("the %d bytes read equal the bytes written.", WriteLen), nil
}

func (d *demo) explainFetchAdd() string {
	return fmt.Sprintf("The 8-byte word at offset %d of the region holds 40; the client adds 2 with an atomic FETCH_ADD, "+
		"and the server's ATOMIC ACKNOWLEDGE brings back the value the word held before.", demoWordOff)
}

func (d *demo) fetchAdd() (string, error) {
	binary.NativeEndian.PutUint64(d.region.Bytes()[demoWordOff:], 40)
	d.syncServer()
	orig, err := d.atomic(verbs.WRFetchAdd, 2, 0)
	if err != nil {
		return "", err
	}
	if now := d.word(); orig != 40 || now != 42 {
		return "", fmt.Errorf("FETCH_ADD returned %d and left %d, want 40 and 42", orig, now)
	}
	return "the client got 40 back; the word now holds 42.", nil
}

func (d *demo) explainCompareSwap() string {
	return "The client asks COMPARE_SWAP to store 7 if the word still holds 42: it does, so the word becomes 7, " +
		"and the original value comes back."
}

func (d *demo) compareSwap() (string, error) {
	orig, err := d.atomic(verbs.WRCompareSwap, 42, 7)
	if err != nil {
		return "", err
	}
	if now := d.word(); orig != 42 || now != 7 {
		return "", fmt.Errorf("COMPARE_SWAP returned %d and left %d, want 42 and 7", orig, now)
	}
	return "the client got 42 back; the word now holds 7.", nil
}

// atomic runs an atomic on the demo's word and returns the original value.
func (d *demo) atomic(op verbs.WROpcode, compareAdd, swap uint64) (uint64, error) {
	const off = 3 * WriteLen // past the WRITE's and the READ's bytes
	if _, err := d.postOK(&verbs.SendWR{Opcode: op, SGL: []verbs.SGE{d.local.SGE(off, 8)},
		RemoteAddr: d.remote.Addr + demoWordOff, RKey: d.remote.RKey, CompareAdd: compareAdd, Swap: swap}); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(d.local.Bytes()[off:]), nil
}

func (d *demo) explainSend() string {
	return "Two-sided messaging: the server posts a receive buffer, the client SENDs a message into it, " +
		"and both sides get a completion (the server's says how many bytes arrived)."
}

func (d *demo) send() (string, error) {
	msg := []byte("hello, server: this is a SEND")
	const roff = demoRegionSize - 1024 // the server's receive buffer
	if err := d.sconn.QP().PostRecv(&verbs.RecvWR{ID: 100, SGL: []verbs.SGE{d.region.SGE(roff, 1024)}}); err != nil {
		return "", err
	}
	copy(d.local.Bytes(), msg)
	if _, err := d.postOK(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{d.local.SGE(0, len(msg))}}); err != nil {
		return "", err
	}
	wc, err := d.wait(d.scq, "the server's receive")
	if err != nil {
		return "", err
	}
	got := d.region.Bytes()[roff : roff+int(wc.ByteLen)]
	if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || wc.ID != 100 || !bytes.Equal(got, msg) {
		return "", fmt.Errorf("the server's completion is %v with %q, want RECV SUCCESS with %q", &wc, got, msg)
	}
	return fmt.Sprintf("the server's completion: %v; its buffer holds %q.", &wc, got), nil
}

func (d *demo) explainWriteImm() string {
	return fmt.Sprintf("An RDMA WRITE WITH IMMEDIATE writes memory like a WRITE and also consumes a receive buffer at the server, "+
		"whose completion carries 32 bits of immediate data (%#x): a way to tell the target that data has arrived.", demoImm)
}

func (d *demo) writeImm() (string, error) {
	data := []byte("written with imm")
	if err := d.sconn.QP().PostRecv(&verbs.RecvWR{ID: 101}); err != nil {
		return "", err
	}
	copy(d.local.Bytes(), data)
	if _, err := d.postOK(&verbs.SendWR{Opcode: verbs.WRWriteImm, Imm: demoImm, SGL: []verbs.SGE{d.local.SGE(0, len(data))},
		RemoteAddr: d.remote.Addr + demoImmOff, RKey: d.remote.RKey}); err != nil {
		return "", err
	}
	wc, err := d.wait(d.scq, "the server's receive")
	if err != nil {
		return "", err
	}
	if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecvWriteImm || wc.Flags&verbs.WCWithImm == 0 || wc.Imm != demoImm {
		return "", fmt.Errorf("the server's completion is %v imm=%#x, want RECV_RDMA_WITH_IMM SUCCESS imm=%#x", &wc, wc.Imm, demoImm)
	}
	d.syncServer()
	if got := d.region.Bytes()[demoImmOff : demoImmOff+len(data)]; !bytes.Equal(got, data) {
		return "", fmt.Errorf("the server's memory holds %q, want %q", got, data)
	}
	return fmt.Sprintf("the server's completion: %v imm=%#x; its memory holds %q.", &wc, wc.Imm, data), nil
}

// wrongRKey is a key the server never handed out: the region's index plus
// one, which no region of the server has.
func (d *demo) wrongRKey() uint32 { return d.remote.RKey + 1<<8 }

func (d *demo) explainBadRKey() string {
	return fmt.Sprintf("Last, a mistake on purpose: the client WRITEs 8 bytes with rkey %#x, which the server never handed out; "+
		"the server's NIC refuses with a NAK (remote access error), the WR completes with REM_ACCESS_ERR, "+
		"and both QPs move to the error state: an access violation ends an RC connection.", d.wrongRKey())
}

func (d *demo) badRKey() (string, error) {
	_, naksBefore := d.counts()
	wr := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{d.local.SGE(0, 8)}, RemoteAddr: d.remote.Addr, RKey: d.wrongRKey()}
	wc, err := d.post(&wr)
	if err != nil {
		return "", err
	}
	if wc.Status != verbs.RemAccessErr {
		return "", fmt.Errorf("the WRITE completed with %v, want REM_ACCESS_ERR", wc.Status)
	}
	if _, naks := d.counts(); naks != naksBefore+1 {
		return "", fmt.Errorf("%d remote access error NAKs were sent, want 1", naks-naksBefore)
	}
	for _, c := range []*nic.Conn{d.cconn, d.sconn} {
		if st := c.QP().Status().State; st != verbs.Err {
			return "", fmt.Errorf("QP %#x is in state %v, want ERR", c.QP().Num(), st)
		}
	}
	e := tooldev.CompletionError{Status: wc.Status, Op: wr.Opcode, RKey: wr.RKey, Addr: wr.RemoteAddr, N: 8, Peer: d.server.Addr()}
	return fmt.Sprintf("%v; both QPs are in state ERR.", &e), nil
}

func (d *demo) explainDisconnect() string {
	return "The client closes the connection through the connection manager: " +
		"its DREQ is answered by the server's DREP, and both QPs are destroyed."
}

func (d *demo) disconnect() (string, error) {
	if err := d.cconn.Close(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(d.ctx, scenario.StepTimeout)
	defer cancel()
	for _, c := range []<-chan struct{}{d.sconn.Done(), d.dreps} {
		select {
		case <-c:
		case <-ctx.Done():
			return "", errors.New("the server did not answer the disconnection")
		}
	}
	return "both ends are disconnected.", nil
}

// Where the demo's NICs listen: RoCEv2's own port on two addresses of the
// loopback range, so that Wireshark and softnic decode read the capture as
// they read any RoCEv2 capture; if another program holds one of them,
// free ports on 127.0.0.1.
var demoAddrs = [2]netip.AddrPort{
	netip.MustParseAddrPort("127.77.0.1:4791"),
	netip.MustParseAddrPort("127.77.0.2:4791"),
}

// openDemoNICs opens the server's and the client's devices with their
// configurations, at demoAddrs or else on free ports of 127.0.0.1.
func openDemoNICs(scfg, ccfg nic.Config) (server, client *nic.Device, err error) {
	open := func(a, b netip.AddrPort) (*nic.Device, *nic.Device, error) {
		ca, cb := scfg, ccfg
		ca.Addr, cb.Addr = a, b
		s, err := nic.Open(ca)
		if err != nil {
			return nil, nil, err
		}
		c, err := nic.Open(cb)
		if err != nil {
			s.Close()
			return nil, nil, err
		}
		return s, c, nil
	}
	if server, client, err = open(demoAddrs[0], demoAddrs[1]); err == nil {
		return server, client, nil
	}
	free := netip.MustParseAddrPort("127.0.0.1:0")
	return open(free, free)
}

// Titles returns the titles of the tour's steps, in order.
func Titles() []string {
	t := make([]string, len(demoSteps))
	for i, s := range demoSteps {
		t[i] = s.title
	}
	return t
}
