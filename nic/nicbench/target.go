package nicbench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"sync"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/verbs"
)

// DeviceTarget is a target on a device of this process.
type DeviceTarget struct {
	Dev *nic.Device
	PD  *nic.PD
	MR  *nic.MR
	CQ  *nic.CQ // every accepted QP's (a responder completes nothing)
}

// NewDeviceTarget makes device d a target: a PD, a region of RegionSize
// bytes written all over, and a CQ. Closing the device releases them.
func NewDeviceTarget(d *nic.Device) (*DeviceTarget, error) {
	t := &DeviceTarget{Dev: d}
	var err error
	if t.PD, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if t.MR, err = t.PD.AllocMR(RegionSize, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		return nil, err
	}
	Fill(t.MR.Bytes())
	if t.CQ, err = d.CreateCQ(2 * Window); err != nil {
		return nil, err
	}
	return t, nil
}

// Addr is the device's address.
func (t *DeviceTarget) Addr() netip.AddrPort { return t.Dev.Addr() }

// Region is the target's region.
func (t *DeviceTarget) Region() Region { return Region{Addr: t.MR.Addr(), RKey: t.MR.RKey()} }

// Accept creates a QP and connects it to QP qpn at from.
func (t *DeviceTarget) Accept(from netip.AddrPort, qpn uint32, opts nic.ConnectOptions, depth int) (uint32, error) {
	q, err := t.PD.CreateQP(nic.QPConfig{SendCQ: t.CQ, MaxSendWR: depth, MaxRecvWR: depth})
	if err != nil {
		return 0, err
	}
	if err := q.Connect(from, qpn, opts); err != nil {
		q.Destroy()
		return 0, err
	}
	return q.Num(), nil
}

// poll polls the target's CQ until stop is closed, each poll holding cpu,
// which a busy-polling echo takes while it spins (udptest.EchoPoll).
func (t *DeviceTarget) poll(stop <-chan struct{}, cpu sync.Locker) {
	var wcs [16]verbs.WC
	for i := 0; ; i++ {
		if i%1024 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		cpu.Lock()
		_, err := t.CQ.Poll(wcs[:])
		cpu.Unlock()
		if err != nil {
			return
		}
	}
}

// Close does nothing: the device is its opener's to close.
func (t *DeviceTarget) Close() error { return nil }

// The protocol between Peer and ServePeer: one JSON object a line. The
// peer process says hello; then each accept request gets one reply.
type (
	peerHello struct {
		Addr   netip.AddrPort `json:"addr"`
		Region Region         `json:"region"`
		Echo   netip.AddrPort `json:"echo"` // a UDP socket that sends every datagram back
		// EchoPoll is another, served by a busy-polling goroutine
		// (udptest.EchoPoll).
		EchoPoll netip.AddrPort `json:"echo_poll"`
	}
	peerAccept struct {
		From  netip.AddrPort     `json:"from"`
		QPN   uint32             `json:"qpn"`
		Opts  nic.ConnectOptions `json:"opts"`
		Depth int                `json:"depth"`
	}
	peerReply struct {
		QPN uint32 `json:"qpn"`
		Err string `json:"err,omitempty"`
	}
)

// ServePeer is the body of a peer process: it opens a device with cfg,
// makes it a target, opens two UDP echo sockets beside it for the raw
// ping-pongs (one read by a goroutine that sleeps, one by a goroutine
// that busy-polls while datagrams come), says hello on out, and accepts the QPs that in asks for, one
// request a line, until in ends (as it does when the process that started
// this one exits: the peer dies with it). With by Poll, a goroutine polls
// the target's CQ in a loop all the while, which makes it process the
// device's packets itself (see nic.CQ.Poll), as fi_rmabw's target drives
// its provider's progress by reading its CQ; with Wait the device's own
// goroutines do, as in a program that sleeps.
func ServePeer(in io.Reader, out io.Writer, cfg nic.Config, by Completion) error {
	cfg.Embed = true
	d, err := nic.Open(cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	t, err := NewDeviceTarget(d)
	if err != nil {
		return err
	}
	echo, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(d.Addr().Addr(), 0)))
	if err != nil {
		return err
	}
	echoPoll, err := udp.Listen(netip.AddrPortFrom(d.Addr().Addr(), 0), udp.Options{})
	if err != nil {
		echo.Close()
		return err
	}
	var running sync.WaitGroup
	defer running.Wait()
	// The CQ's poller and the polling echo take turns: on two CPUs, a
	// third thread spinning beside the ping-pong's two would share them.
	var cpu sync.Mutex
	running.Go(func() { udptest.Echo(echo) })
	running.Go(func() { udptest.EchoPoll(echoPoll, &cpu) })
	defer echo.Close()
	defer echoPoll.Close()
	if by == Poll {
		stop := make(chan struct{})
		defer close(stop)
		running.Go(func() { t.poll(stop, &cpu) })
	}
	enc := json.NewEncoder(out)
	hello := peerHello{Addr: t.Addr(), Region: t.Region(), Echo: echo.LocalAddr().(*net.UDPAddr).AddrPort(), EchoPoll: echoPoll.LocalAddr()}
	if err := enc.Encode(hello); err != nil {
		return err
	}
	dec := json.NewDecoder(in)
	for {
		var req peerAccept
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("peer: %w", err)
		}
		var rep peerReply
		if rep.QPN, err = t.Accept(req.From, req.QPN, req.Opts, req.Depth); err != nil {
			rep.Err = err.Error()
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
}

// Peer is a target in another process, which runs ServePeer.
type Peer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dec   *json.Decoder
	enc   *json.Encoder
	hello peerHello
}

// StartPeer starts cmd, a process that runs ServePeer on its standard
// input and output, and waits for its hello. The process ends when Close
// closes its input, or when this process exits.
func StartPeer(cmd *exec.Cmd) (*Peer, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("peer process: %w", err)
	}
	p := &Peer{cmd: cmd, stdin: stdin, dec: json.NewDecoder(bufio.NewReader(stdout)), enc: json.NewEncoder(stdin)}
	if err := p.dec.Decode(&p.hello); err != nil {
		p.Close()
		return nil, fmt.Errorf("peer process: no hello: %w", err)
	}
	return p, nil
}

// Addr is the peer device's address.
func (p *Peer) Addr() netip.AddrPort { return p.hello.Addr }

// Region is the peer's region.
func (p *Peer) Region() Region { return p.hello.Region }

// Echo is the peer's UDP echo socket, for udptest.MeasurePingPongTo.
func (p *Peer) Echo() netip.AddrPort { return p.hello.Echo }

// EchoPoll is the peer's busy-polled UDP echo socket, for
// udptest.MeasurePingPongPollTo.
func (p *Peer) EchoPoll() netip.AddrPort { return p.hello.EchoPoll }

// Accept asks the peer for a QP connected to QP qpn at from.
func (p *Peer) Accept(from netip.AddrPort, qpn uint32, opts nic.ConnectOptions, depth int) (uint32, error) {
	if err := p.enc.Encode(peerAccept{From: from, QPN: qpn, Opts: opts, Depth: depth}); err != nil {
		return 0, fmt.Errorf("peer process: %w", err)
	}
	var rep peerReply
	if err := p.dec.Decode(&rep); err != nil {
		return 0, fmt.Errorf("peer process: %w", err)
	}
	if rep.Err != "" {
		return 0, fmt.Errorf("peer process: %s", rep.Err)
	}
	return rep.QPN, nil
}

// Close ends the peer process and waits for it.
func (p *Peer) Close() error {
	p.stdin.Close()
	return p.cmd.Wait()
}
