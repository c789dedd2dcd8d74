/*
 * The objects libsoftnic hands to C programs: each embeds the public
 * structure of <infiniband/verbs.h> or <rdma/rdma_cma.h> that programs
 * read (first, so that a pointer to one is a pointer to the other), and
 * names its Go side by h, a runtime/cgo handle.
 */
#ifndef SOFTNIC_H
#define SOFTNIC_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

struct sn_context {
	struct verbs_context vctx; /* its ibv_context is what programs hold */
	uintptr_t h;
	int async_w; /* the write end of context.async_fd */
};

/* sn_context_of is the sn_context whose ibv_context is ctx. */
static inline struct sn_context *sn_context_of(struct ibv_context *ctx)
{
	return (struct sn_context *)((char *)ctx - offsetof(struct sn_context, vctx.context));
}

struct sn_pd { struct ibv_pd pd; uintptr_t h; };
struct sn_mr { struct ibv_mr mr; uintptr_t h; };
struct sn_mw { struct ibv_mw mw; uintptr_t h; };
/* A CQ: an ibv_cq, or the ibv_cq_ex of ibv_create_cq_ex, which begins
 * with the members of an ibv_cq (abi/verbs_ex.c). */
struct sn_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	};
	uintptr_t h;
	uint32_t events; /* events ibv_get_cq_event returned, for ibv_destroy_cq */
	pthread_mutex_t poll_mu; /* held from start_poll to end_poll */
	struct ibv_wc wc;        /* the completion start_poll or next_poll took, for the read_ ops */
};
struct sn_srq {
	struct ibv_srq srq;
	uintptr_t h;
	uint32_t async_events; /* events ibv_get_async_event returned, for ibv_destroy_srq */
};
/* A QP: an ibv_qp, or for one of ibv_create_qp_ex the ibv_qp_ex that
 * begins with it (abi/verbs_ex.c). */
struct sn_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx;
	};
	uintptr_t h;
	struct ibv_qp_cap cap; /* as created, for ibv_query_qp */
	uint32_t async_events; /* events ibv_get_async_event returned, for ibv_destroy_qp */
	int ex;                /* made by ibv_create_qp_ex: ibv_qp_to_qp_ex gives qpx */
	struct sn_wr_batch *wrs; /* the ibv_wr_* API's state, one allocation; NULL without it */
};

/* An address handle: the peer's address as the Go side resolved it. */
struct sn_ah {
	struct ibv_ah ah;
	uint8_t ip[16]; /* IPv6, or IPv4-mapped */
	uint16_t port;
	uint8_t traffic_class; /* grh.traffic_class: the datagrams' IP DSCP and ECN */
};

/* A completion channel (events.go): ch.fd, what programs poll, is an
 * epoll set of the wakeups of the channel's CQs, whose data is the CQ's
 * handle, and of the read end r of a pipe, data 0, to which the library
 * writes a pointer to each CQ with an event it raises itself. */
struct sn_channel {
	struct ibv_comp_channel ch;
	int r, w;	/* the pipe, both ends non-blocking */
	int pending;	/* events written to the pipe and not read yet */
	uintptr_t h;	/* the Go side's handle */
};

/* The members of ibv_send_wr's anonymous unions, named for Go. */
struct sn_wr_rdma { uint64_t remote_addr; uint32_t rkey; };
struct sn_wr_atomic { uint64_t remote_addr; uint64_t compare_add; uint64_t swap; uint32_t rkey; };
struct sn_wr_ud { struct ibv_ah *ah; uint32_t remote_qpn; uint32_t remote_qkey; };
struct sn_wr_bind { struct ibv_mw *mw; uint32_t rkey; struct ibv_mw_bind_info info; };

/* What async_fd carries for each asynchronous event. */
struct sn_async_event {
	uint32_t type; /* enum ibv_event_type */
	uint32_t pad;
	void *obj;     /* the ibv_qp, ibv_cq or ibv_srq */
};

/* An rdma_cm event channel: events are queued on the Go side, and one
 * byte per event is written to w so that channel.fd polls readable. */
struct sn_event_channel {
	struct rdma_event_channel ch;
	uintptr_t h;
	int w;
};

/* An rdma_cm_id. The QP attributes of a passive endpoint (rdma_create_ep
 * with RAI_PASSIVE) make the QP of each id rdma_get_request returns. */
struct sn_cm_id {
	struct rdma_cm_id id;
	uintptr_t h;
	int own_cqs; /* rdma_create_qp made id.send_cq and id.recv_cq */
	int has_qp_attr;
	struct ibv_qp_init_attr qp_attr;
};

/* An address as the Go side takes it: IPv6 or IPv4-mapped, and a port. */
struct sn_addr {
	uint8_t ip[16];
	uint16_t port;
};

/* An rdma_cm event with the private data it carries, and the id whose
 * rdma_destroy_id waits for its rdma_ack_cm_event: ev.id's, or for a
 * CONNECT_REQUEST its listener's. */
struct sn_cm_event {
	struct rdma_cm_event ev;
	uint8_t private_data[256];
	struct sn_cm_id *owner;
};

/* sn_unsupported names an unsupported call once on stderr and sets errno
 * to EOPNOTSUPP. */
void sn_unsupported(const char *name); /* in abi/unsupported.c */

/* In abi/verbs_ex.c: sn_ex_ops sets its extended verbs in vctx, and
 * sn_free_wrs frees a QP's ibv_wr_* state, for ibv_destroy_qp. */
void sn_ex_ops(struct verbs_context *vctx);
void sn_free_wrs(struct sn_qp *qp);

/* In abi/rdmacm.c: sn_cm_verbs is the context of rdma_cm ids, sn_new_child
 * makes the id of a connection request on listen, and sn_set_addr writes
 * an address into a socket address. */
struct ibv_context *sn_cm_verbs(void);
struct sn_cm_id *sn_new_child(struct sn_cm_id *listen);
void sn_set_addr(struct sockaddr_storage *ss, const struct sn_addr *a);

/* The functions of the C entry points (abi/, libibverbs.so.1) that the Go
 * side (libsoftnic-go.so) calls. The entry points load the Go library at
 * their first call that needs it (abi/golib.c) and hand it these
 * (snLinkABI), which it keeps in sn_abi and calls through the sn_abi_
 * functions below. */
struct sn_abi {
	struct sn_cm_id *(*new_child)(struct sn_cm_id *listen);
	void (*set_addr)(struct sockaddr_storage *ss, const struct sn_addr *a);
	int (*destroy_id)(struct rdma_cm_id *id);
};

extern struct sn_abi sn_abi; /* the Go side's, in calls.c */

static inline struct sn_cm_id *sn_abi_new_child(struct sn_cm_id *listen)
{
	return sn_abi.new_child(listen);
}

static inline void sn_abi_set_addr(struct sockaddr_storage *ss, const struct sn_addr *a)
{
	sn_abi.set_addr(ss, a);
}

static inline int sn_abi_destroy_id(struct rdma_cm_id *id)
{
	return sn_abi.destroy_id(id);
}

#endif
