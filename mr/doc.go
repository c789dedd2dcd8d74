// Package mr is softnic's memory-region table: protection domains, memory
// regions, memory windows and NIC-owned arenas, and the access check every
// RDMA READ, WRITE and ATOMIC goes through.
//
// It owns the memory remote peers reach: caller slices pinned with
// runtime.Pinner for the life of a registration, or anonymous mappings
// outside the Go heap (Arena). It must not let any access touch memory
// outside a registered region, whatever the key, address and length, and it
// must not pull memory out from under a transfer: a Span keeps its memory
// pinned or mapped until released. It imports nothing of softnic but its
// key space (mr/keyspace), and knows nothing of packets or QPs beyond a
// Requester's PD, QPN and P_Key.
//
// # Two faces
//
// The verbs face follows ibv_reg_mr(3) and the Linux rxe driver:
// Table.Register, RegisterImplicit, Deregister, Rereg, AllocWindow,
// BindWindow, Invalidate, Prefetch. The libfabric face, package nic/fabric,
// keeps fi_mr(3)'s rules and registers through RegisterWith (several
// buffers, requested keys, partitions, a disabled start), binds regions to
// counters and endpoints with Region.Bind, and enables and refreshes them;
// the table checks what the data path must: keys, partitions, endpoints,
// the disabled and refreshing states, and counts remote writes. The
// registration Cache, sized by FI_MR_CACHE_*, serves either. Both faces
// land in the same Table.
//
// # Keys
//
// A key names a slot of a two-level array by its 23-bit index, and the
// whole key is compared, so that a key left over from a deregistered region
// never matches the region that reuses its slot: each slot has an 8-bit
// variant, random at first and changed on every reuse, and a freed index
// waits behind others before it is reused. lkey and rkey are equal, as in
// rxe. Unlike rxe's index<<8 | variant, a key the table chooses does not
// show how it was built: a region's index and variant pass together
// through a keyed permutation, a window's index through another (its low
// byte is the consumer's, as the IBTA wants). Bit 31 tells windows from
// regions, as rxe's MR and MW pools do; keys applications request
// (fi_mr) are kept as asked, in a table of their own. Package mr/keyspace
// builds and finds them.
//
// # Addresses
//
// A region's remote addresses are virtual addresses (the buffer's address,
// like ibv_reg_mr's iova) or, with ZeroBased, offsets from 0. An iov region
// (fi_mr_regv) is one contiguous address space over all its buffers. The
// memory itself is indexed by machine address in google/btree B-trees
// (BTreeG, one per length class) for RegionAt, implicit on-demand paging and
// the registration cache. Readers of the index use an immutable
// copy-on-write snapshot and never wait for registration.
//
// # The data path
//
// Table.Remote and Table.Local check a key, an address range, the access and
// the requester, and return a Span or a Reason (for counters: a responder
// NAKs every reason alike). Neither allocates, and both run concurrently
// with registration and deregistration.
package mr
