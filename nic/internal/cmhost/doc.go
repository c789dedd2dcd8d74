// Package cmhost hosts the connection manager of an embedded device: the
// I/O-free engine of package nic/cm run on the device's QP1, the General
// Services Interface. It owns QP1 and its receive buffers, feeds the
// engine the MADs QP1 receives, time and the application's calls, and
// carries out what the engine's output asks (wakes the goroutines that
// wait, flushes the QPs of connections the peer ended, sends MADs); and
// the provider objects of the connection manager that package nic wraps:
// the listeners, requests and connections, with the RC QPs they connect
// and the attributes negotiated (host.go, conn.go), and the service ID
// resolutions of rdma_cm's UDP port space (sidr.go).
//
// It sees its device through two narrow interfaces: Device (QP1 and
// connections' QPs made in it, its clock and timer goroutine, its routes,
// its counters) and QP (a connection's QP: the provider's QP with an
// error hook, a halt that reports nothing, and a hook for the first
// request its responder takes). Package nic/internal/embedded implements
// both and drives the host: Poll after each batch of packets, Shutdown as
// the device closes. It knows nothing of the device's packet path.
package cmhost
