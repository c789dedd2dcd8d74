package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// maxOpBytes bounds the data of one write, read or send: the local buffer
// is held in memory.
const maxOpBytes = 1 << 30

// The CM and transport timing of a one-shot operation: the whole of it is
// bounded by --timeout, so the REQ is retransmitted often (4.096 µs × 2^16
// ≈ 268 ms) and a vanished daemon fails the WR after a few ACK timeouts
// rather than never (7 would retry forever, as rxe does).
const (
	opCMTimeout  = 16
	opRetryCount = 6
	opRNRRetry   = 6
)

// opFlags are the flags every one-shot operation has.
type opFlags struct {
	peer    *string
	cmPort  *uint
	timeout *time.Duration
	mtu     *flagval.Size
	remote  bool        // the operation addresses remote memory: --rkey and --addr
	rkey    flagval.Num // 32 bits
	addr    flagval.Num // 64 bits
}

func addOpFlags(fs *flag.FlagSet, remote bool) *opFlags {
	o := &opFlags{remote: remote, rkey: flagval.Num{Bits: 32}, addr: flagval.Num{Bits: 64}}
	o.peer = fs.String("peer", "", "the softnic device to reach, `HOST[:PORT]` (port 4791 by default) (required)")
	o.cmPort = fs.Uint("cm-port", defaultCMPort, "the peer's rdma_cm `PORT`")
	o.timeout = fs.Duration("timeout", 5*time.Second, "give up after `DURATION` (connecting, the operation and disconnecting)")
	o.mtu = addMTUFlag(fs, 0, "cap the path `MTU`: 256 to 4096 (default: what the interface toward the peer carries, as rxe derives it)")
	if remote {
		fs.Var(&o.rkey, "rkey", "the remote region's `KEY` (decimal or 0x hex) (required)")
		fs.Var(&o.addr, "addr", "the remote `ADDRESS` (decimal or 0x hex), as serve's ready line gives a region's addr (required)")
	}
	return o
}

// check reports missing or bad common flags as usage errors.
func (o *opFlags) check() error {
	if *o.peer == "" {
		return usagef("missing --peer HOST:PORT")
	}
	if o.remote && !o.rkey.Given {
		return usagef("missing --rkey")
	}
	if o.remote && !o.addr.Given {
		return usagef("missing --addr")
	}
	if *o.cmPort == 0 || *o.cmPort > 0xFFFF {
		return usagef("--cm-port %d: want a port from 1 to 65535", *o.cmPort)
	}
	if *o.timeout <= 0 {
		return usagef("--timeout %v: want a positive duration such as 2s", *o.timeout)
	}
	return checkMTUFlag(o.mtu.Val)
}

// dataArg returns the bytes of --data or --file, exactly one of which must
// be given.
func dataArg(data, file string) ([]byte, error) {
	switch {
	case data != "" && file != "":
		return nil, usagef("give either --data or --file, not both")
	case data != "":
		return []byte(data), nil
	case file == "":
		return nil, usagef("missing --data STRING or --file FILE")
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 || fi.Size() > maxOpBytes {
		return nil, usagef("--file %s: %d bytes; want 1 to %d", file, fi.Size(), maxOpBytes)
	}
	return os.ReadFile(file)
}

func defineWrite(fs *flag.FlagSet) func(*invocation) error {
	o := addOpFlags(fs, true)
	return defineDataOp(fs, "write", func() verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRWrite, RemoteAddr: o.addr.Val, RKey: uint32(o.rkey.Val)}
	}, o, func(wr *verbs.SendWR, n int, peer netip.AddrPort) string {
		return fmt.Sprintf("wrote %d bytes at %#x (rkey %#x) on %v", n, wr.RemoteAddr, wr.RKey, peer)
	})
}

// defineDataOp defines the --data/--file flags of an operation that
// carries bytes to the peer (write, send) and runs it: mk builds its WR,
// report says what was done.
func defineDataOp(fs *flag.FlagSet, verb string, mk func() verbs.SendWR, o *opFlags,
	report func(wr *verbs.SendWR, n int, peer netip.AddrPort) string) func(*invocation) error {
	data := fs.String("data", "", verb+" `STRING`")
	file := fs.String("file", "", verb+" the contents of `FILE`")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		if err := o.check(); err != nil {
			return err
		}
		buf, err := dataArg(*data, *file)
		if err != nil {
			return err
		}
		wr := mk()
		peer, err := o.run(inv.ctx, &wr, buf)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(inv.stdout, report(&wr, len(buf), peer))
		return err
	}
}

func defineRead(fs *flag.FlagSet) func(*invocation) error {
	o := addOpFlags(fs, true)
	var n flagval.Size
	fs.Var(&n, "len", "read `SIZE` bytes, such as 4096, 64k or 1MiB (required)")
	out := fs.String("out", "", "write the bytes to `FILE` instead of stdout")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		if err := o.check(); err != nil {
			return err
		}
		if !n.Given {
			return usagef("missing --len N")
		}
		if n.Val == 0 || n.Val > maxOpBytes {
			return usagef("--len %d: want 1 to %d bytes", n.Val, maxOpBytes)
		}
		buf := make([]byte, n.Val)
		wr := verbs.SendWR{Opcode: verbs.WRRead, RemoteAddr: o.addr.Val, RKey: uint32(o.rkey.Val)}
		peer, err := o.run(inv.ctx, &wr, buf)
		if err != nil {
			return err
		}
		if *out == "" {
			_, err = inv.stdout.Write(buf)
			return err
		}
		if err := os.WriteFile(*out, buf, 0o644); err != nil {
			return err
		}
		_, err = fmt.Fprintf(inv.stdout, "read %d bytes at %#x (rkey %#x) on %v into %s\n", len(buf), wr.RemoteAddr, wr.RKey, peer, *out)
		return err
	}
}

// defineAtomic defines fadd (compare == false) and cswap.
func defineAtomic(compare bool) func(fs *flag.FlagSet) func(*invocation) error {
	return func(fs *flag.FlagSet) func(*invocation) error {
		o := addOpFlags(fs, true)
		first, swap := flagval.Num{Bits: 64, Signed: true}, flagval.Num{Bits: 64, Signed: true}
		if compare {
			fs.Var(&first, "compare", "swap only if the 8-byte word holds `VALUE` (required)")
			fs.Var(&swap, "swap", "the `VALUE` to store (required)")
		} else {
			fs.Var(&first, "add", "add `N` to the 8-byte word; negative numbers subtract (required)")
		}
		return func(inv *invocation) error {
			if err := inv.parse(0, 0); err != nil {
				return err
			}
			if err := o.check(); err != nil {
				return err
			}
			wr := verbs.SendWR{Opcode: verbs.WRFetchAdd, RemoteAddr: o.addr.Val, RKey: uint32(o.rkey.Val), CompareAdd: first.Val}
			switch {
			case compare && !first.Given:
				return usagef("missing --compare VALUE")
			case compare && !swap.Given:
				return usagef("missing --swap VALUE")
			case !compare && !first.Given:
				return usagef("missing --add N")
			case o.addr.Val%8 != 0:
				return usagef("--addr %#x: atomics work on 8-byte words at addresses divisible by 8", o.addr.Val)
			}
			if compare {
				wr.Opcode, wr.Swap = verbs.WRCompareSwap, swap.Val
			}
			var orig [8]byte
			if _, err := o.run(inv.ctx, &wr, orig[:]); err != nil {
				return err
			}
			// The completion leaves the original value in the local buffer
			// as a 64-bit word in host byte order, as libibverbs does.
			_, err := fmt.Fprintf(inv.stdout, "%d\n", binary.NativeEndian.Uint64(orig[:]))
			return err
		}
	}
}

func defineSend(fs *flag.FlagSet) func(*invocation) error {
	o := addOpFlags(fs, false)
	return defineDataOp(fs, "send", func() verbs.SendWR { return verbs.SendWR{Opcode: verbs.WRSend} }, o,
		func(_ *verbs.SendWR, n int, peer netip.AddrPort) string {
			return fmt.Sprintf("sent %d bytes to %v", n, peer)
		})
}

// run connects to the peer through its connection manager, posts wr with
// buf as its local memory, waits for the completion and disconnects, all
// within --timeout. It returns the peer's address.
func (o *opFlags) run(ctx context.Context, wr *verbs.SendWR, buf []byte) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, *o.timeout)
	defer cancel()
	peer, err := resolvePeer(ctx, *o.peer)
	if err != nil {
		return peer, usagef("--peer: %v", err)
	}
	s, err := dialSession(ctx, peer, uint16(*o.cmPort), o.mtu.Val, buf)
	if err != nil {
		return peer, explainDial(err, peer, uint16(*o.cmPort), *o.timeout)
	}
	defer s.close(ctx)
	wr.ID, wr.Flags = 1, verbs.Signaled
	wr.SGL = []verbs.SGE{s.mr.SGE(0, len(buf))}
	if err := s.conn.QP().PostSend(wr); err != nil {
		return peer, fmt.Errorf("posting the %v: %w", wr.Opcode, err)
	}
	var wc [1]verbs.WC
	if _, err := s.cq.Wait(ctx, wc[:]); err != nil {
		if ctx.Err() != nil {
			return peer, fmt.Errorf("no completion of the %v from %v within %v: %w", wr.Opcode, peer, *o.timeout, err)
		}
		return peer, err
	}
	if wc[0].Status != verbs.Success {
		return peer, &tooldev.CompletionError{Status: wc[0].Status, Op: wr.Opcode, RKey: wr.RKey, Addr: wr.RemoteAddr, N: len(buf), Peer: peer}
	}
	return peer, nil
}

// session is a connected RC QP to a peer's connection manager, with the
// local buffer of one operation registered.
type session struct {
	dev  *nic.Device
	cq   *nic.CQ
	mr   *nic.MR
	conn *nic.Conn
}

// dialSession opens a device on a free port (on loopback to reach a
// loopback peer, else on every interface) whose path MTU is at most mtu (0:
// no cap below 4096), registers buf and connects a QP to the peer's
// rdma_cm port.
func dialSession(ctx context.Context, peer netip.AddrPort, cmPort uint16, mtu int, buf []byte) (*session, error) {
	local := netip.IPv4Unspecified()
	switch {
	case peer.Addr().IsLoopback():
		local = peer.Addr()
	case peer.Addr().Is6():
		local = netip.IPv6Unspecified()
	}
	dev, err := nic.Open(nic.Config{Addr: netip.AddrPortFrom(local, 0), MTU: mtu})
	if err != nil {
		return nil, err
	}
	s := &session{dev: dev}
	pd, err := dev.AllocPD()
	if err == nil {
		s.cq, err = dev.CreateCQ(4)
	}
	if err == nil {
		s.mr, err = pd.RegMR(buf, mr.LocalWrite)
	}
	if err == nil {
		s.conn, err = dev.Dial(ctx, peer, cmPort, nic.DialOptions{
			PD: pd, QP: nic.QPConfig{SendCQ: s.cq},
			CMTimeout: opCMTimeout, RetryCount: opRetryCount, RNRRetryCount: opRNRRetry,
		})
	}
	if err != nil {
		dev.Close()
		return nil, err
	}
	return s, nil
}

// close disconnects (DREQ), waiting for the peer's DREP no longer than ctx
// allows, and closes the device.
func (s *session) close(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.conn.Close()
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.dev.Close()
	<-done
}

// explainDial says in words why connecting failed.
func explainDial(err error, peer netip.AddrPort, cmPort uint16, timeout time.Duration) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nic.ErrTimedOut):
		return fmt.Errorf("no answer from %v (rdma_cm port %d) within %v: is softnic serve running there? (%w)", peer, cmPort, timeout, err)
	case errors.Is(err, nic.ErrConnRefused):
		return fmt.Errorf("%v has no listener on rdma_cm port %d (see --cm-port): %w", peer, cmPort, err)
	}
	return fmt.Errorf("connecting to %v, rdma_cm port %d: %w", peer, cmPort, err)
}
