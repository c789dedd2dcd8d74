//go:build linux && libsoftnic

package main

/*
#cgo CFLAGS: -Wall -Wextra -Werror
#include "softnic.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime/cgo"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/softnic/softnic/cmd/libsoftnic/internal/pages"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The device: one softnic device per daemon, named softnic0, whose
// contexts are sessions with the daemon.

// socketPath is the control socket of the daemon the library attaches to.
func socketPath() string {
	if p := os.Getenv(nic.EnvSocket); p != "" {
		return p
	}
	return nic.DefaultSocket()
}

var hintOnce sync.Once

// snLinkABI keeps the functions of the C entry points that the Go side
// calls (struct sn_abi): they hand them over when they load this library.
//
//export snLinkABI
func snLinkABI(a *C.struct_sn_abi) { C.sn_abi = *a }

// snDeviceCount returns 1 if a daemon listens on the control socket, else
// 0, saying once on stderr how to start one.
//
//export snDeviceCount
func snDeviceCount() C.int {
	path := socketPath()
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return 1
	}
	hintOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "softnic: no softnic daemon at %s (%v): start one with \"softnic serve --control %s\", or name another with SOFTNIC_SOCKET\n",
			path, unwrapSyscall(err), path)
	})
	return 0
}

func unwrapSyscall(err error) error {
	var se syscall.Errno
	if errors.As(err, &se) {
		return se
	}
	return err
}

// device is the Go side of an ibv_context: a device attached to the daemon.
type device struct {
	dev   *nic.Device
	ctx   *C.struct_sn_context
	async *asyncEvents
}

// snOpen attaches a context to the daemon.
//
//export snOpen
func snOpen(ctx *C.struct_sn_context) C.int {
	async := newAsyncEvents(int(ctx.vctx.context.async_fd), int(ctx.async_w))
	dev, err := nic.Open(nic.Config{Attach: socketPath(), OnQPError: async.qpError, OnSRQLimit: async.srqLimit})
	if err != nil {
		fmt.Fprintf(os.Stderr, "softnic: ibv_open_device: %v\n", err)
		return errnoOf(err)
	}
	go async.watch(dev)
	ctx.h = C.uintptr_t(cgo.NewHandle(&device{dev: dev, ctx: ctx, async: async}))
	return 0
}

// snClose detaches a context: the daemon destroys what it still holds.
//
//export snClose
func snClose(ctx *C.struct_sn_context) C.int {
	h := cgo.Handle(ctx.h)
	d := h.Value().(*device)
	close(d.async.stop)
	<-d.async.closed
	d.dev.Close()
	h.Delete()
	return 0
}

// deviceOf is the device of a context, which sits at the end of its
// sn_context (after the verbs_context, as libibverbs lays them out).
func deviceOf(ctx *C.struct_ibv_context) *device {
	c := (*C.struct_sn_context)(unsafe.Add(unsafe.Pointer(ctx), -int(ctxOffset)))
	return cgo.Handle(c.h).Value().(*device)
}

const ctxOffset = unsafe.Offsetof(C.struct_sn_context{}.vctx) + unsafe.Offsetof(C.struct_verbs_context{}.context)

// gid is the device's one GID: its IPv4 address mapped into IPv6 (or its
// IPv6 address), of RoCE v2 type, as rxe's GID table has it.
func (d *device) gid() [16]byte { return d.dev.Addr().Addr().As16() }

//export snDeviceGUID
func snDeviceGUID(ctx *C.struct_ibv_context) C.uint64_t {
	return C.uint64_t(deviceOf(ctx).dev.Query().NodeGUID)
}

// mtuEnum is ibv_mtu of a path MTU in bytes.
func mtuEnum(n int) C.enum_ibv_mtu {
	if m, ok := wire.MTUFromBytes(n); ok {
		return C.enum_ibv_mtu(m)
	}
	return C.IBV_MTU_1024
}

//export snQueryDevice
func snQueryDevice(ctx *C.struct_ibv_context, a *C.struct_ibv_device_attr) C.int {
	q := deviceOf(ctx).dev.Query()
	*a = C.struct_ibv_device_attr{}
	for i := 0; i < len(q.FWVer) && i < len(a.fw_ver)-1; i++ {
		a.fw_ver[i] = C.char(q.FWVer[i])
	}
	a.node_guid = C.__be64(htobe64(q.NodeGUID))
	a.sys_image_guid = C.__be64(htobe64(q.SysImageGUID))
	a.max_mr_size = C.uint64_t(q.MaxMRSize)
	a.page_size_cap = C.uint64_t(q.PageSizeCap)
	a.vendor_id = C.uint32_t(q.VendorID)
	a.vendor_part_id = C.uint32_t(q.VendorPartID)
	a.hw_ver = C.uint32_t(q.HWVer)
	a.max_qp = C.int(q.MaxQP)
	a.max_qp_wr = C.int(q.MaxQPWR)
	a.device_cap_flags = C.uint(q.Caps)
	a.max_sge = C.int(q.MaxSGE)
	a.max_sge_rd = C.int(q.MaxSGERd)
	a.max_cq = C.int(q.MaxCQ)
	a.max_cqe = C.int(q.MaxCQE)
	a.max_mr = C.int(q.MaxMR)
	a.max_pd = C.int(q.MaxPD)
	a.max_qp_rd_atom = C.int(q.MaxQPRdAtom)
	a.max_qp_init_rd_atom = C.int(q.MaxQPInitRdAtom)
	a.max_res_rd_atom = C.int(min(q.MaxResRdAtom, math.MaxInt32))
	a.atomic_cap = C.enum_ibv_atomic_cap(q.AtomicCap)
	a.max_mw = C.int(q.MaxMW)
	a.max_srq = C.int(q.MaxSRQ)
	a.max_srq_wr = C.int(q.MaxSRQWR)
	a.max_srq_sge = C.int(q.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(q.MaxPKeys)
	a.max_mcast_grp = C.int(q.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(q.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(q.MaxTotalMcastQPAttach)
	a.local_ca_ack_delay = C.uint8_t(q.LocalCAAckDelay)
	a.phys_port_cnt = C.uint8_t(q.PhysPortCnt)
	return 0
}

//export snQueryPort
func snQueryPort(ctx *C.struct_ibv_context, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	if port != 1 {
		return C.EINVAL
	}
	d := deviceOf(ctx)
	*a = C.struct_ibv_port_attr{}
	a.state = C.IBV_PORT_ACTIVE
	a.max_mtu = C.IBV_MTU_4096
	a.active_mtu = mtuEnum(d.dev.MTU())
	a.gid_tbl_len = 1
	a.port_cap_flags = C.IBV_PORT_CM_SUP
	a.max_msg_sz = qp.MaxMessageSize
	a.pkey_tbl_len = 1
	a.active_width = 1  // 1X
	a.active_speed = 32 // EDR: 25 Gbit/s per lane, what a loopback device may well move
	a.phys_state = 5    // LinkUp
	a.link_layer = C.IBV_LINK_LAYER_ETHERNET
	return 0
}

//export snQueryGID
func snQueryGID(ctx *C.struct_ibv_context, port C.uint8_t, index C.int, gid *C.union_ibv_gid) C.int {
	if port != 1 || index != 0 {
		return C.EINVAL
	}
	g := deviceOf(ctx).gid()
	copy(unsafe.Slice((*byte)(unsafe.Pointer(gid)), 16), g[:])
	return 0
}

// htobe64 is the big-endian (network order) representation of v, as
// stored in a __be64 field on this little- or big-endian host.
func htobe64(v uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return binary.NativeEndian.Uint64(b[:])
}

// htobe32 is htobe64 for 32 bits; it is its own inverse.
func htobe32(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.NativeEndian.Uint32(b[:])
}

// peerOf turns the GID of an address vector into the UDP address of the
// peer's device: its IP address, and RoCEv2's port 4791, or this device's
// own port when the GID is this device's (two programs on one daemon); a
// multicast group's address at this device's port, where every device
// of the group listens (4791, but for a test's daemons on one host).
func (d *device) peerOf(gid *[16]byte) (netip.AddrPort, bool) {
	a := netip.AddrFrom16(*gid).Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		return netip.AddrPort{}, false
	}
	own := d.dev.Addr()
	if own.Addr().Unmap() == a || a.IsMulticast() {
		return netip.AddrPortFrom(a, own.Port()), true
	}
	return netip.AddrPortFrom(a, wire.UDPPort), true
}

// errnoOf maps an error of package nic (or of the library) to the errno
// rdma-core returns in its place.
func errnoOf(err error) C.int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, nic.ErrInvalid):
		return C.EINVAL
	case errors.Is(err, nic.ErrNoMem):
		return C.ENOMEM
	case errors.Is(err, nic.ErrBusy):
		return C.EBUSY
	case errors.Is(err, nic.ErrFault), errors.Is(err, pages.ErrFault):
		return C.EFAULT
	case errors.Is(err, nic.ErrNotSupported), errors.Is(err, pages.ErrShared), errors.Is(err, pages.ErrHuge):
		return C.EOPNOTSUPP
	case errors.Is(err, nic.ErrAgain):
		return C.EAGAIN
	case errors.Is(err, nic.ErrTimedOut):
		return C.ETIMEDOUT
	case errors.Is(err, nic.ErrConnRefused):
		return C.ECONNREFUSED
	case errors.Is(err, nic.ErrConnReset):
		return C.ECONNRESET
	case errors.Is(err, nic.ErrProtoNotSupported):
		// A daemon of another release: libibverbs answers ENOSYS for a
		// kernel ABI it does not speak, but EPROTONOSUPPORT says which
		// thing is wrong, and the stderr line names both versions.
		return C.EPROTONOSUPPORT
	case errors.Is(err, nic.ErrClosed):
		return C.EIO
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		return C.int(se)
	}
	return C.EIO
}

var (
	unsupportedMu   sync.Mutex
	unsupportedSeen = map[string]bool{}
)

// unsupported names something softnic does not do, once per process, on
// stderr.
func unsupported(what string) {
	unsupportedMu.Lock()
	defer unsupportedMu.Unlock()
	if !unsupportedSeen[what] {
		unsupportedSeen[what] = true
		fmt.Fprintf(os.Stderr, "softnic: %s: not supported\n", what)
	}
}

// snUnsupported is unsupported for the C layer's calls (sn_unsupported).
//
//export snUnsupported
func snUnsupported(name *C.char) { unsupported(C.GoString(name)) }

var (
	wcStrOnce sync.Once
	wcStrs    []*C.char
)

// snWCStatusStr is ibv_wc_status_str: qp.WCStatus's text, as C strings
// made once.
//
//export snWCStatusStr
func snWCStatusStr(status C.enum_ibv_wc_status) *C.char {
	wcStrOnce.Do(func() {
		for s := verbs.Success; s <= verbs.GeneralErr; s++ {
			wcStrs = append(wcStrs, C.CString(s.Text()))
		}
		wcStrs = append(wcStrs, C.CString("unknown"))
	})
	if int(status) < len(wcStrs)-1 {
		return wcStrs[status]
	}
	return wcStrs[len(wcStrs)-1]
}
