/*
 * libibverbs' extended verbs, as Linux rxe's provider offers them: the
 * inlines ibv_query_device_ex, ibv_create_cq_ex and ibv_create_qp_ex find
 * them through the verbs_context (sn_ex_ops).
 *
 * An extended CQ is an ordinary one (ibv_create_cq) whose ibv_cq_ex
 * members poll it one completion at a time through ops.poll_cq, the path
 * of ibv_poll_cq, into the CQ's wc, which the read_ ops read.
 *
 * An extended QP is an ordinary one (ibv_create_qp) whose ibv_qp_ex
 * members build, between wr_start and wr_complete, the chain of
 * ibv_send_wr that ibv_post_send would take, in arrays allocated with
 * the QP (max_send_wr work requests, each with room for max_send_sge
 * SGEs and max_inline_data bytes, into which wr_set_inline_data copies):
 * wr_complete posts the chain as one batch, wr_abort drops it.
 * As on rxe, the first error of a builder or setter (ENOSPC: more work
 * requests than the send queue holds, more SGEs or inline bytes than the
 * QP takes) drops the rest and is what wr_complete returns, posting
 * nothing; and wr_complete posts the chain whole or not at all
 * (snPostSendBatch: ENOSPC when the send queue lacks room for it all).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "softnic.h"
#include "golib.h"

/* The completion fields rxe offers, and so softnic (as rxe, the SLID, SL
 * and DLID path bits are 0 on RoCE): a timestamp or any other is
 * EOPNOTSUPP. */
#define SN_WC_FLAGS                                                                                        \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

static struct sn_cq *sn_cq_of(struct ibv_cq_ex *cqx)
{
	return (struct sn_cq *)cqx;
}

/* sn_cq_take polls the next completion into the CQ's wc: 0, ENOENT if
 * there is none, or EIO if the CQ cannot be polled (the daemon is gone). */
static int sn_cq_take(struct ibv_cq_ex *cqx)
{
	struct sn_cq *cq = sn_cq_of(cqx);
	int got = cq->cq.context->ops.poll_cq(&cq->cq, 1, &cq->wc);

	if (got == 1) {
		cqx->status = cq->wc.status;
		cqx->wr_id = cq->wc.wr_id;
		return 0;
	}
	errno = got ? EIO : ENOENT;
	return errno;
}

/* sn_start_poll holds the CQ, as rxe does, until sn_end_poll, unless it
 * fails: the completion it takes is the CQ's until then. */
static int sn_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	struct sn_cq *cq = sn_cq_of(cqx);
	int err;

	if (attr && attr->comp_mask) {
		errno = EINVAL;
		return EINVAL;
	}
	pthread_mutex_lock(&cq->poll_mu);
	err = sn_cq_take(cqx);
	if (err)
		pthread_mutex_unlock(&cq->poll_mu);
	return err;
}

static int sn_next_poll(struct ibv_cq_ex *cqx)
{
	return sn_cq_take(cqx);
}

/* sn_end_poll lets the CQ go: each completion left it as it was taken. */
static void sn_end_poll(struct ibv_cq_ex *cqx)
{
	pthread_mutex_unlock(&sn_cq_of(cqx)->poll_mu);
}

/* SN_READ defines the read_ op of a field of the current completion. */
#define SN_READ(type, field)                                   \
	static type sn_read_##field(struct ibv_cq_ex *cqx)     \
	{                                                      \
		return sn_cq_of(cqx)->wc.field;                \
	}

SN_READ(enum ibv_wc_opcode, opcode)
SN_READ(uint32_t, vendor_err)
SN_READ(uint32_t, byte_len)
/* The immediate data, or the invalidated rkey of a SEND_WITH_INV, which
 * shares its place in the ibv_wc (as on rxe). */
SN_READ(__be32, imm_data)
SN_READ(uint32_t, qp_num)
SN_READ(uint32_t, src_qp)
SN_READ(unsigned int, wc_flags)
SN_READ(uint32_t, slid)
SN_READ(uint8_t, sl)
SN_READ(uint8_t, dlid_path_bits)

/* sn_create_cq_ex is ibv_create_cq_ex. As on rxe, the read_ ops of the
 * fields not asked for in wc_flags are NULL; IBV_CREATE_CQ_ATTR_
 * SINGLE_THREADED is a hint, IGNORE_OVERRUN is EOPNOTSUPP (rxe's kernel
 * side refuses every CQ creation flag). */
static struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct ibv_cq *ibcq;
	struct ibv_cq_ex *cqx;

	if ((attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) ||
	    (attr->wc_flags & ~(uint64_t)SN_WC_FLAGS) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->cqe > INT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	ibcq = ibv_create_cq(ctx, (int)attr->cqe, attr->cq_context, attr->channel, (int)attr->comp_vector);
	if (!ibcq)
		return NULL;
	cqx = &((struct sn_cq *)ibcq)->cqx;
	cqx->start_poll = sn_start_poll;
	cqx->next_poll = sn_next_poll;
	cqx->end_poll = sn_end_poll;
	cqx->read_opcode = sn_read_opcode;
	cqx->read_vendor_err = sn_read_vendor_err;
	cqx->read_wc_flags = sn_read_wc_flags;
	if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		cqx->read_byte_len = sn_read_byte_len;
	if (attr->wc_flags & IBV_WC_EX_WITH_IMM)
		cqx->read_imm_data = sn_read_imm_data;
	if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM)
		cqx->read_qp_num = sn_read_qp_num;
	if (attr->wc_flags & IBV_WC_EX_WITH_SRC_QP)
		cqx->read_src_qp = sn_read_src_qp;
	if (attr->wc_flags & IBV_WC_EX_WITH_SLID)
		cqx->read_slid = sn_read_slid;
	if (attr->wc_flags & IBV_WC_EX_WITH_SL)
		cqx->read_sl = sn_read_sl;
	if (attr->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		cqx->read_dlid_path_bits = sn_read_dlid_path_bits;
	return cqx;
}

/* The work requests an extended QP builds (see above). */
struct sn_wr_batch {
	pthread_mutex_t mu; /* held from wr_start to wr_complete or wr_abort */
	int err;            /* the first error since wr_start */
	uint32_t n, max;    /* work requests built, and room */
	uint32_t max_sge, max_inline;
	struct ibv_send_wr *wr; /* max */
	struct ibv_sge *sge;    /* max_sge for each */
	uint8_t *inline_data;   /* max_inline for each */
};

static struct sn_wr_batch *sn_wrs_of(struct ibv_qp_ex *qpx)
{
	return ((struct sn_qp *)qpx)->wrs;
}

static void sn_wr_start(struct ibv_qp_ex *qpx)
{
	struct sn_wr_batch *b = sn_wrs_of(qpx);

	pthread_mutex_lock(&b->mu);
	b->err = 0;
	b->n = 0;
}

static int sn_wr_complete(struct ibv_qp_ex *qpx)
{
	struct sn_wr_batch *b = sn_wrs_of(qpx);
	int err = b->err;

	if (!err && b->n) {
		for (uint32_t i = 0; i + 1 < b->n; i++)
			b->wr[i].next = &b->wr[i + 1];
		b->wr[b->n - 1].next = NULL;
		err = snPostSendBatch(&qpx->qp_base, b->wr);
	}
	b->n = 0;
	pthread_mutex_unlock(&b->mu);
	return err;
}

static void sn_wr_abort(struct ibv_qp_ex *qpx)
{
	struct sn_wr_batch *b = sn_wrs_of(qpx);

	b->n = 0;
	pthread_mutex_unlock(&b->mu);
}

/* sn_wr_new starts the next work request of opcode op, with the QP's
 * wr_id and wr_flags; NULL once an error has happened. */
static struct ibv_send_wr *sn_wr_new(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct sn_wr_batch *b = sn_wrs_of(qpx);
	struct ibv_send_wr *w;

	if (b->err)
		return NULL;
	if (b->n == b->max) {
		b->err = ENOSPC;
		return NULL;
	}
	w = &b->wr[b->n];
	memset(w, 0, sizeof(*w));
	w->wr_id = qpx->wr_id;
	w->send_flags = qpx->wr_flags;
	w->opcode = op;
	w->sg_list = &b->sge[(size_t)b->n * b->max_sge];
	b->n++;
	return w;
}

/* sn_wr_last is the work request the setters complete; NULL once an error
 * has happened, or with none built (EINVAL). */
static struct ibv_send_wr *sn_wr_last(struct sn_wr_batch *b)
{
	if (b->err)
		return NULL;
	if (!b->n) {
		b->err = EINVAL;
		return NULL;
	}
	return &b->wr[b->n - 1];
}

static void sn_wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *w = sn_wr_new(qpx, op);

	if (w) {
		w->wr.rdma.remote_addr = addr;
		w->wr.rdma.rkey = rkey;
		w->imm_data = imm;
	}
}

static void sn_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	sn_wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void sn_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	sn_wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void sn_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	sn_wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void sn_wr_atomic(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr,
			 uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr *w = sn_wr_new(qpx, op);

	if (w) {
		w->wr.atomic.remote_addr = addr;
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.compare_add = compare_add;
		w->wr.atomic.swap = swap;
	}
}

static void sn_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t compare,
				 uint64_t swap)
{
	sn_wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void sn_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t add)
{
	sn_wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void sn_wr_send(struct ibv_qp_ex *qpx)
{
	sn_wr_new(qpx, IBV_WR_SEND);
}

static void sn_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct ibv_send_wr *w = sn_wr_new(qpx, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm;
}

/* sn_wr_inv is a work request of op that invalidates rkey. */
static void sn_wr_inv(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op, uint32_t rkey)
{
	struct ibv_send_wr *w = sn_wr_new(qpx, op);

	if (w)
		w->invalidate_rkey = rkey;
}

static void sn_wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	sn_wr_inv(qpx, IBV_WR_SEND_WITH_INV, rkey);
}

static void sn_wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	sn_wr_inv(qpx, IBV_WR_LOCAL_INV, rkey);
}

static void sn_wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *w = sn_wr_new(qpx, IBV_WR_BIND_MW);

	if (w) {
		w->bind_mw.mw = mw;
		w->bind_mw.rkey = rkey;
		w->bind_mw.bind_info = *info;
	}
}

static void sn_wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_send_wr *w = sn_wr_last(sn_wrs_of(qpx));

	if (w) {
		w->wr.ud.ah = ah;
		w->wr.ud.remote_qpn = remote_qpn;
		w->wr.ud.remote_qkey = remote_qkey;
	}
}

static void sn_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_send_wr *w = sn_wr_last(sn_wrs_of(qpx));

	/* As on rxe, an SGE of no bytes leaves the work request without. */
	if (w && length) {
		w->sg_list[0] = (struct ibv_sge){ .addr = addr, .length = length, .lkey = lkey };
		w->num_sge = 1;
	}
}

static void sn_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *list)
{
	struct sn_wr_batch *b = sn_wrs_of(qpx);
	struct ibv_send_wr *w = sn_wr_last(b);

	if (!w)
		return;
	if (n > b->max_sge) {
		b->err = ENOSPC;
		return;
	}
	memcpy(w->sg_list, list, n * sizeof(*list));
	w->num_sge = (int)n;
}

static void sn_wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *bufs)
{
	struct sn_wr_batch *b = sn_wrs_of(qpx);
	struct ibv_send_wr *w = sn_wr_last(b);
	uint8_t *data;
	size_t len = 0;

	if (!w)
		return;
	data = &b->inline_data[(size_t)(b->n - 1) * b->max_inline];
	for (size_t i = 0; i < n; i++) {
		if (bufs[i].length > b->max_inline - len) {
			b->err = ENOSPC;
			return;
		}
		memcpy(data + len, bufs[i].addr, bufs[i].length);
		len += bufs[i].length;
	}
	/* The copy is the SGE of an IBV_SEND_INLINE work request, whose
	 * addresses ibv_post_send reads as the program's pointers. */
	w->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)data, .length = (uint32_t)len };
	w->num_sge = len ? 1 : 0;
	w->send_flags |= IBV_SEND_INLINE;
}

static void sn_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	sn_wr_set_inline_data_list(qpx, 1, &buf);
}

/* The ibv_qp_ex operations each QP type supports, as on rxe less what
 * softnic lacks (IBV_QP_EX_WITH_FLUSH, IBV_QP_EX_WITH_ATOMIC_WRITE). */
#define SN_UD_SEND_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)
#define SN_UC_SEND_OPS                                                                              \
	(SN_UD_SEND_OPS | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |          \
	 IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV)
#define SN_RC_SEND_OPS                                                                              \
	(SN_UC_SEND_OPS | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |            \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV)

static uint64_t sn_send_ops(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
		return SN_RC_SEND_OPS;
	case IBV_QPT_UC:
		return SN_UC_SEND_OPS;
	case IBV_QPT_UD:
		return SN_UD_SEND_OPS;
	default:
		return 0;
	}
}

/* sn_wr_ops allocates qp's work request arrays for its capabilities and
 * sets the builders send_ops_flags asks for: 0, or ENOMEM. */
static int sn_wr_ops(struct sn_qp *qp, uint64_t flags)
{
	struct ibv_qp_ex *x = &qp->qpx;
	struct sn_wr_batch *b;
	size_t max = qp->cap.max_send_wr, sges = qp->cap.max_send_sge ? qp->cap.max_send_sge : 1;
	size_t inl = qp->cap.max_inline_data;

	b = calloc(1, sizeof(*b) + max * (sizeof(*b->wr) + sges * sizeof(*b->sge) + inl));
	if (!b)
		return ENOMEM;
	pthread_mutex_init(&b->mu, NULL);
	b->max = (uint32_t)max;
	b->max_sge = (uint32_t)sges;
	b->max_inline = (uint32_t)inl;
	b->wr = (struct ibv_send_wr *)(b + 1);
	b->sge = (struct ibv_sge *)(b->wr + max);
	b->inline_data = (uint8_t *)(b->sge + max * sges);
	qp->wrs = b;

	x->wr_start = sn_wr_start;
	x->wr_complete = sn_wr_complete;
	x->wr_abort = sn_wr_abort;
	x->wr_set_ud_addr = sn_wr_set_ud_addr;
	x->wr_set_sge = sn_wr_set_sge;
	x->wr_set_sge_list = sn_wr_set_sge_list;
	x->wr_set_inline_data = sn_wr_set_inline_data;
	x->wr_set_inline_data_list = sn_wr_set_inline_data_list;
	if (flags & IBV_QP_EX_WITH_RDMA_WRITE)
		x->wr_rdma_write = sn_wr_rdma_write;
	if (flags & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		x->wr_rdma_write_imm = sn_wr_rdma_write_imm;
	if (flags & IBV_QP_EX_WITH_SEND)
		x->wr_send = sn_wr_send;
	if (flags & IBV_QP_EX_WITH_SEND_WITH_IMM)
		x->wr_send_imm = sn_wr_send_imm;
	if (flags & IBV_QP_EX_WITH_RDMA_READ)
		x->wr_rdma_read = sn_wr_rdma_read;
	if (flags & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
		x->wr_atomic_cmp_swp = sn_wr_atomic_cmp_swp;
	if (flags & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
		x->wr_atomic_fetch_add = sn_wr_atomic_fetch_add;
	if (flags & IBV_QP_EX_WITH_LOCAL_INV)
		x->wr_local_inv = sn_wr_local_inv;
	if (flags & IBV_QP_EX_WITH_BIND_MW)
		x->wr_bind_mw = sn_wr_bind_mw;
	if (flags & IBV_QP_EX_WITH_SEND_WITH_INV)
		x->wr_send_inv = sn_wr_send_inv;
	return 0;
}

void sn_free_wrs(struct sn_qp *qp)
{
	if (qp->wrs) {
		pthread_mutex_destroy(&qp->wrs->mu);
		free(qp->wrs);
	}
}

/* sn_create_qp_ex is ibv_create_qp_ex past the inline's shortcut for a PD
 * alone: as on rxe, a PD, no creation flags, and the send operations the
 * QP type supports; anything else is EOPNOTSUPP. */
static struct ibv_qp *sn_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	struct ibv_qp *ibqp;
	struct sn_qp *qp;
	int err;

	if ((attr->comp_mask & ~known) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	     (attr->send_ops_flags & ~sn_send_ops(attr->qp_type)))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	/* ibv_qp_init_attr_ex begins with the members of ibv_qp_init_attr. */
	ibqp = ibv_create_qp(attr->pd, (struct ibv_qp_init_attr *)attr);
	if (!ibqp)
		return NULL;
	qp = (struct sn_qp *)ibqp;
	qp->ex = 1;
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		err = sn_wr_ops(qp, attr->send_ops_flags);
		if (err) {
			ibv_destroy_qp(ibqp);
			errno = err;
			return NULL;
		}
	}
	return ibqp;
}

/* ibv_qp_to_qp_ex: the ibv_qp_ex of a QP ibv_create_qp_ex made, NULL for
 * others, as libibverbs. */
__attribute__((visibility("default"))) struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	struct sn_qp *qp = (struct sn_qp *)ibqp;

	return qp->ex ? &qp->qpx : NULL;
}

/* sn_query_device_ex is ibv_query_device_ex: ibv_query_device's
 * attributes, and of the extended ones what rxe reports that softnic has
 * (the capability flags in 64 bits, the port count, on-demand paging as
 * rxe reports it since it gained ODP in 2025: explicit regions, for every
 * operation of RC and UD but UC's); the rest (implicit ODP, timestamps,
 * TSO, RSS, tag matching, CQ moderation, device memory, PCI atomics …) 0.
 * attr_size is the size of the program's ibv_device_attr_ex, smaller in
 * an older program. */
static int sn_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a = { 0 };
	int err;

	if ((input && input->comp_mask) || attr_size < sizeof(a.orig_attr))
		return EINVAL;
	err = ibv_query_device(ctx, &a.orig_attr);
	if (err)
		return err;
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	a.odp_caps.general_caps = IBV_ODP_SUPPORT;
	a.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	memcpy(attr, &a, attr_size < sizeof(a) ? attr_size : sizeof(a));
	return 0;
}

/* sn_advise_mr is ibv_advise_mr, as rxe takes it: the three prefetch
 * advices (others EOPNOTSUPP), no flag but IBV_ADVISE_MR_FLAG_FLUSH and
 * at least one SGE (EINVAL), each SGE's range in an on-demand paging
 * region of pd (snPrefetchMR). softnic's memory is always there, so the
 * prefetch is done when the call returns, flushed or not. */
static int sn_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
			uint32_t num_sge)
{
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	if ((flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !sg_list || !num_sge)
		return EINVAL;
	for (uint32_t i = 0; i < num_sge; i++) {
		int err = snPrefetchMR((struct sn_pd *)pd, sg_list[i].lkey, sg_list[i].addr, sg_list[i].length);

		if (err)
			return err;
	}
	return 0;
}

void sn_ex_ops(struct verbs_context *vctx)
{
	vctx->query_device_ex = sn_query_device_ex;
	vctx->advise_mr = sn_advise_mr;
	vctx->create_cq_ex = sn_create_cq_ex;
	vctx->create_qp_ex = sn_create_qp_ex;
}
