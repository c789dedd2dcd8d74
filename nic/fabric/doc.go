// Package fabric is softnic's libfabric face: fi_mr(3) memory registration
// and kfi_rma(3) endpoints, built on package nic's public API as
// libfabric's verbs provider is built on libibverbs.
//
// It owns the libfabric rules and nothing below them:
//
//   - A Domain (a resource domain, fi_domain) has its own protection
//     domain and mr_mode and registers memory regions (Registration) with
//     Reg, Regv and Regattr: requested keys, iov lists, auth keys as
//     P_Keys, raw keys, binding to counters and endpoints, enable, refresh,
//     asynchronous completion on an event queue, and a registration cache
//     sized by FI_MR_CACHE_*. The regions land in the device's region table
//     (package mr), which checks every remote access against them.
//   - An Endpoint is an RC QP and its CQ with the RMA calls (read, write,
//     inject, write with remote CQ data, receive) and their flags
//     (FI_COMPLETION, FI_MORE, FI_FENCE, FI_INJECT, FI_REMOTE_CQ_DATA),
//     mapped onto work requests; completions carry the operation's
//     context and flags.
//
// Flags are libfabric's one 64-bit flag space; errors are nic's and mr's
// sentinels (ErrInvalid, ErrAgain, ErrBadFlags, ErrNoKey …). An fi_mr
// Domain needs an embedded device (an attached device's table is the
// daemon's: ErrNotSupported); an Endpoint works on either.
package fabric
