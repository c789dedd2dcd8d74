//go:build libsoftnic

/*
 * libibverbs' extended verbs, as Linux rxe's provider offers them: the
 * inline ibv_create_cq_ex finds sn_create_cq_ex through the
 * verbs_context (sn_ex_ops).
 *
 * An extended CQ is an ordinary one (ibv_create_cq) whose ibv_cq_ex
 * members poll it one completion at a time through ops.poll_cq, the path
 * of ibv_poll_cq, into the CQ's wc, which the read_ ops read.
 */
#include <errno.h>

#include "softnic.h"

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

static int sn_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask) {
		errno = EINVAL;
		return EINVAL;
	}
	return sn_cq_take(cqx);
}

static int sn_next_poll(struct ibv_cq_ex *cqx)
{
	return sn_cq_take(cqx);
}

/* sn_end_poll has nothing to do: each completion left the CQ as it was
 * taken. */
static void sn_end_poll(struct ibv_cq_ex *cqx)
{
	(void)cqx;
}

static enum ibv_wc_opcode sn_read_opcode(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.opcode;
}

static uint32_t sn_read_vendor_err(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.vendor_err;
}

static uint32_t sn_read_byte_len(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.byte_len;
}

/* sn_read_imm_data is the immediate data, or the invalidated rkey of a
 * SEND_WITH_INV, which shares its place in the ibv_wc (as on rxe). */
static __be32 sn_read_imm_data(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.imm_data;
}

static uint32_t sn_read_qp_num(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.qp_num;
}

static uint32_t sn_read_src_qp(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.src_qp;
}

static unsigned int sn_read_wc_flags(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.wc_flags;
}

static uint32_t sn_read_slid(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.slid;
}

static uint8_t sn_read_sl(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.sl;
}

static uint8_t sn_read_dlid_path_bits(struct ibv_cq_ex *cqx)
{
	return sn_cq_of(cqx)->wc.dlid_path_bits;
}

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

void sn_ex_ops(struct verbs_context *vctx)
{
	vctx->create_cq_ex = sn_create_cq_ex;
}
