// Package rping plays either side of rdma-core's rping
// (librdmacm/examples/rping.c) over the connection manager, against rping
// itself or another softnic rping, for softnic rping. Each ping goes:
//
//	client                                   server
//	SEND source buffer (addr, rkey, len) →
//	                                         RDMA READ of the source
//	                                       ← SEND "go ahead"
//	SEND sink buffer (addr, rkey, len)   →
//	                                         RDMA WRITE of the data into the sink
//	                                       ← SEND "go ahead"
//	compare the sink with the source
//
// The buffer information is rping's struct rping_rdma_info: a 64-bit
// address, a 32-bit rkey and a 32-bit length, big-endian. The data of
// ping n is "rdma-ping-n: " followed by letters from 'A'+n on, cycling
// through 'A' to 'z', ending in a NUL. The client leaves with a DREQ.
package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/softnic/softnic/cmd/softnic/internal/exit"
	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// rping's defaults and limits.
const (
	DefaultPort     = 7174 // rping's default rdma_cm port
	DefaultSize     = 64
	MinSize         = 26 // room for "rdma-ping-2147483647: " and a NUL, as rping reckons it
	MaxSize         = 64<<10 - 1
	rpingInfoSize   = 16 // struct rping_rdma_info
	rpingRecvs      = 2  // rping's receive queue depth
	rpingSendDepth  = 16 // RPING_SQ_DEPTH
	rpingFirstChar  = 'A'
	rpingLastChar   = 'z'
	rpingResponders = 1 // rping's responder resources and initiator depth
)

// Config is one side of rping: softnic rping's command line, its
// addresses resolved.
type Config struct {
	Server   bool
	Local    netip.Addr     // the address of the device (the server listens on it)
	Peer     netip.AddrPort // the client's server
	Count    int            // pings; 0 for ever
	Size     int
	Verbose  bool
	CMPort   uint16
	UDPPort  uint16
	MTU      int
	Counters bool
	Pcap     string
}

// rpingData writes ping n's data into b, as rping's client does.
func rpingData(b []byte, n int) {
	head := fmt.Appendf(nil, "rdma-ping-%d: ", n)
	i := copy(b, head)
	c := byte(rpingFirstChar + n%(rpingLastChar-rpingFirstChar+1))
	for ; i < len(b); i++ {
		b[i] = c
		if c++; c > rpingLastChar {
			c = rpingFirstChar
		}
	}
	b[len(b)-1] = 0
}

// cString returns b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// rpingInfo is rping's struct rping_rdma_info.
type rpingInfo struct {
	addr uint64
	rkey uint32
	size uint32
}

func (r rpingInfo) marshal() []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, rpingInfoSize), r.addr)
	b = binary.BigEndian.AppendUint32(b, r.rkey)
	return binary.BigEndian.AppendUint32(b, r.size)
}

func parseRpingInfo(b []byte) rpingInfo {
	return rpingInfo{binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

// errDisconnected is the peer's disconnection while a completion is
// awaited.
var errDisconnected = errors.New("the peer disconnected")

// rpingSession is one side of one rping connection.
type rpingSession struct {
	cfg  *Config
	out  io.Writer
	dev  *tooldev.Device
	pd   *nic.PD
	cq   *nic.CQ
	srq  *nic.SRQ
	recv *nic.MR // rpingRecvs receive buffers of rpingInfoSize bytes
	rdma *nic.MR // the client's sink, the server's destination of the READ
	src  *nic.MR // the client's source
	conn *nic.Conn
	ctx  context.Context // ends when the connection does
	wcs  [4]verbs.WC
	have []verbs.WC // polled, not yet taken
}

// Run opens the device and runs the client or the server.
func Run(ctx context.Context, cfg *Config, stdout io.Writer) (err error) {
	mtu, err := tooldev.MTU(cfg.Local, cfg.MTU)
	if err != nil {
		return err
	}
	s := &rpingSession{cfg: cfg, out: stdout}
	if s.dev, err = tooldev.Open(tooldev.Config{Addr: netip.AddrPortFrom(cfg.Local, cfg.UDPPort), MTU: mtu, Pcap: cfg.Pcap}); err != nil {
		return err
	}
	defer func() {
		// Counters once the device is closed, so that they count every
		// packet it sent; after a failure too, since they help explain it.
		err = errors.Join(err, s.dev.Close())
		if cfg.Counters {
			err = errors.Join(err, tooldev.PrintCounters(s.out, s.dev.Device))
		}
	}()
	if err := s.setup(); err != nil {
		return err
	}
	if cfg.Server {
		return s.serve(ctx)
	}
	return s.ping(ctx, cfg.Peer)
}

// setup creates the PD, CQ, shared receive queue and buffers, and posts
// the receive buffers: on the SRQ, so that they are there before the
// connection's QP exists (the peer's first SEND may come as soon as it is
// connected).
func (s *rpingSession) setup() error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(2 * rpingSendDepth); err != nil {
		return err
	}
	if s.srq, err = s.pd.CreateSRQ(rpingRecvs, 1); err != nil {
		return err
	}
	if s.recv, err = s.pd.AllocMR(rpingRecvs*rpingInfoSize, mr.LocalWrite); err != nil {
		return err
	}
	access := mr.LocalWrite | mr.RemoteRead | mr.RemoteWrite
	if s.rdma, err = s.pd.AllocMR(s.cfg.Size, access); err != nil {
		return err
	}
	if !s.cfg.Server {
		if s.src, err = s.pd.AllocMR(s.cfg.Size, access); err != nil {
			return err
		}
	}
	for slot := range rpingRecvs {
		if err := s.postRecv(uint64(slot)); err != nil {
			return err
		}
	}
	return nil
}

func (s *rpingSession) postRecv(slot uint64) error {
	wr := verbs.RecvWR{ID: slot, SGL: []verbs.SGE{s.recv.SGE(int(slot)*rpingInfoSize, rpingInfoSize)}}
	if err := s.srq.PostRecv(&wr); err != nil {
		return fmt.Errorf("posting a receive buffer: %w", err)
	}
	return nil
}

func (s *rpingSession) qpConfig() nic.QPConfig {
	return nic.QPConfig{SendCQ: s.cq, SRQ: s.srq, MaxSendWR: rpingSendDepth, MaxSendSGE: 1}
}

// connected starts watching the connection: s.ctx ends when it does.
func (s *rpingSession) connected(ctx context.Context, c *nic.Conn) context.CancelFunc {
	s.conn = c
	var cancel context.CancelFunc
	s.ctx, cancel = context.WithCancel(ctx)
	go func() {
		select {
		case <-c.Done():
			cancel()
		case <-s.ctx.Done():
		}
	}()
	return cancel
}

// await returns the next completion of operation op, after those of the
// SENDs posted before it (rping asks for every completion and ignores the
// SENDs'). A received message's buffer is posted again once it is copied
// out, as rping does; a completion of anything else, or a failed one,
// ends the session.
func (s *rpingSession) await(op verbs.WCOpcode) (verbs.WC, []byte, error) {
	for {
		if len(s.have) == 0 {
			n, err := s.cq.Wait(s.ctx, s.wcs[:])
			if err != nil {
				if s.disconnected() {
					return verbs.WC{}, nil, errDisconnected
				}
				return verbs.WC{}, nil, err
			}
			s.have = s.wcs[:n]
		}
		wc := s.have[0]
		s.have = s.have[1:]
		switch {
		case wc.Status == verbs.WRFlushErr && s.disconnected():
			// The peer's DREQ moved the QP to the error state, which
			// flushes what was outstanding, as rping sees it too.
			return wc, nil, errDisconnected
		case wc.Status != verbs.Success:
			return wc, nil, fmt.Errorf("%v completed with %v (%s)", wc.Opcode, wc.Status, wc.Status.Text())
		case wc.Opcode == op && op == verbs.WCRecv:
			if wc.ByteLen != rpingInfoSize {
				return wc, nil, fmt.Errorf("received %d bytes, rping's messages have %d", wc.ByteLen, rpingInfoSize)
			}
			msg := bytes.Clone(s.recv.Bytes()[int(wc.ID)*rpingInfoSize:][:rpingInfoSize])
			return wc, msg, s.postRecv(wc.ID)
		case wc.Opcode == op:
			return wc, nil, nil
		case wc.Opcode != verbs.WCSend:
			return wc, nil, fmt.Errorf("a completion of %v while waiting for %v", wc.Opcode, op)
		}
	}
}

// disconnected reports whether the connection has ended.
func (s *rpingSession) disconnected() bool {
	select {
	case <-s.conn.Done():
		return true
	default:
		return false
	}
}

// send SENDs msg (copied at once: the WR is inline).
func (s *rpingSession) send(msg []byte) error {
	wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled | verbs.Inline, Inline: msg}
	if err := s.conn.QP().PostSend(&wr); err != nil {
		return fmt.Errorf("posting a SEND: %w", err)
	}
	return nil
}

// rdmaOp runs one RDMA READ or WRITE of n bytes between the rdma buffer
// and the peer's buffer info, and waits for it.
func (s *rpingSession) rdmaOp(op verbs.WROpcode, info rpingInfo, n int) error {
	wr := verbs.SendWR{Opcode: op, Flags: verbs.Signaled, RemoteAddr: info.addr, RKey: info.rkey,
		SGL: []verbs.SGE{s.rdma.SGE(0, n)}}
	if err := s.conn.QP().PostSend(&wr); err != nil {
		return fmt.Errorf("posting the RDMA %v: %w", op, err)
	}
	want := verbs.WCRead
	if op == verbs.WRWrite {
		want = verbs.WCWrite
	}
	_, _, err := s.await(want)
	return err
}

// serve accepts one connection, as rping -s does, and serves its pings
// until the client disconnects, which ends it with success whenever it
// comes, as it ends rping's server.
func (s *rpingSession) serve(ctx context.Context) error {
	ln, err := s.dev.Listen(s.cfg.CMPort, nic.ListenOptions{PD: s.pd, QP: s.qpConfig()})
	if err != nil {
		return exit.Status(2, fmt.Errorf("rdma_cm port %d: %w", s.cfg.CMPort, err))
	}
	c, err := ln.Accept(ctx)
	ln.Close()
	if err != nil {
		return fmt.Errorf("waiting for an rping client: %w", err)
	}
	cancel := s.connected(ctx, c)
	defer cancel()
	defer c.Close()
	want := make([]byte, s.cfg.Size)
	for n := 0; ; n++ {
		if err := s.serveOne(n, want); err != nil {
			if errors.Is(err, errDisconnected) {
				return nil // the client is done
			}
			return fmt.Errorf("ping %d: %w", n, err)
		}
	}
}

// serveOne serves ping n: the READ of the source, checked against rping's
// data (want has room for it), the WRITE into the sink.
func (s *rpingSession) serveOne(n int, want []byte) error {
	_, msg, err := s.await(verbs.WCRecv)
	if err != nil {
		return fmt.Errorf("waiting for the source: %w", err)
	}
	src := parseRpingInfo(msg)
	if src.size == 0 || int(src.size) > s.cfg.Size {
		return fmt.Errorf("the client's %d bytes do not fit the server's %d (-S)", src.size, s.cfg.Size)
	}
	if err := s.rdmaOp(verbs.WRRead, src, int(src.size)); err != nil {
		return fmt.Errorf("RDMA READ of the source: %w", err)
	}
	got, want := s.rdma.Bytes()[:src.size], want[:src.size]
	rpingData(want, n)
	if i := tooldev.FirstDifference(got, want); i >= 0 {
		return fmt.Errorf("%w: byte %d read from the client is %q, rping's data has %q", tooldev.ErrDataCheck, i, got[i], want[i])
	}
	if s.cfg.Verbose {
		fmt.Fprintf(s.out, "server ping data: %s\n", cString(got))
	}
	if err := s.send(make([]byte, rpingInfoSize)); err != nil {
		return err
	}
	if _, msg, err = s.await(verbs.WCRecv); err != nil {
		return fmt.Errorf("waiting for the sink: %w", err)
	}
	sink := parseRpingInfo(msg)
	length := len(cString(got)) + 1 // the string and its NUL, as rping writes it
	if int(sink.size) < length {
		return fmt.Errorf("the client's sink of %d bytes is shorter than the %d to write", sink.size, length)
	}
	if err := s.rdmaOp(verbs.WRWrite, sink, length); err != nil {
		return fmt.Errorf("RDMA WRITE into the sink: %w", err)
	}
	return s.send(make([]byte, rpingInfoSize))
}

// ping connects to the server and runs the pings, then disconnects.
// Pinging for ever (-C 0) ends with an interrupt, as rping's does, and
// that is no failure.
func (s *rpingSession) ping(ctx context.Context, peer netip.AddrPort) error {
	c, err := s.dev.Dial(ctx, peer, s.cfg.CMPort, nic.DialOptions{PD: s.pd, QP: s.qpConfig(),
		ResponderResources: rpingResponders, InitiatorDepth: rpingResponders})
	if err != nil {
		return explainRpingDial(err, peer, s.cfg.CMPort)
	}
	cancel := s.connected(ctx, c)
	defer cancel()
	defer c.Close()
	for n := 0; s.cfg.Count == 0 || n < s.cfg.Count; n++ {
		if err := s.pingOnce(n); err != nil {
			if s.cfg.Count == 0 && ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ping %d: %w", n, err)
		}
	}
	return nil
}

// pingOnce runs ping n: the source out, the sink back, compared.
func (s *rpingSession) pingOnce(n int) error {
	src, sink := s.src.Bytes(), s.rdma.Bytes()
	rpingData(src, n)
	if err := s.send(rpingInfo{s.src.Addr(), s.src.RKey(), uint32(len(src))}.marshal()); err != nil {
		return err
	}
	if _, _, err := s.await(verbs.WCRecv); err != nil {
		return fmt.Errorf("waiting for the server to read: %w", err)
	}
	if err := s.send(rpingInfo{s.rdma.Addr(), s.rdma.RKey(), uint32(len(sink))}.marshal()); err != nil {
		return err
	}
	if _, _, err := s.await(verbs.WCRecv); err != nil {
		return fmt.Errorf("waiting for the server to write: %w", err)
	}
	if i := tooldev.FirstDifference(sink, src); i >= 0 {
		return fmt.Errorf("%w: byte %d came back as %q, was %q", tooldev.ErrDataCheck, i, sink[i], src[i])
	}
	if s.cfg.Verbose {
		fmt.Fprintf(s.out, "ping data: %s\n", cString(sink))
	}
	return nil
}

// explainRpingDial says in words why connecting failed.
func explainRpingDial(err error, peer netip.AddrPort, port uint16) error {
	if errors.Is(err, nic.ErrConnRefused) {
		return fmt.Errorf("%v has no rping server on rdma_cm port %d: %w", peer, port, err)
	}
	return fmt.Errorf("connecting to %v, rdma_cm port %d: %w", peer, port, err)
}
