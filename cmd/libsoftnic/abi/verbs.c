/*
 * libibverbs' entry points. Each allocates or frees the object the program
 * sees and leaves the work to the Go side (golib.h).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "softnic.h"
#include "golib.h"

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))

static struct ibv_device sn_device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "softnic0",
	.dev_name = "softnic0",
};

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **list;
	int n;

	if (sn_refuse("ibv_get_device_list"))
		return NULL;
	n = snDeviceCount();
	list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (n)
		list[0] = &sn_device;
	if (num)
		*num = n;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct ibv_context *ctx = ibv_open_device(device);
	__be64 guid = 0;

	if (ctx) {
		struct ibv_device_attr attr;

		if (!ibv_query_device(ctx, &attr))
			guid = attr.node_guid;
		ibv_close_device(ctx);
	}
	return guid;
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	(void)device;
	return 0;
}

/*
 * sn_data_path is called by the verbs of the data path before they call
 * into Go. A thread of the program that calls into Go keeps a processor
 * of Go's scheduler (a P) between its calls, as a goroutine in a system
 * call does; but Go's system monitor takes a P back from a thread that
 * has not been through the scheduler for 10 ms, and then, as such a thread
 * never goes through it, at each of its ticks: every call then takes an
 * idle P and wakes the monitor from its sleep, a thread woken per verb
 * (two context switches on a busy CPU, in the middle of a post), and the
 * monitor ticks every 20 us. So a call of each thread goes through the
 * scheduler (snReschedule) SN_RESCHEDULE_NS after the last one returned:
 * the monitor then leaves its P alone while it calls. The interval starts
 * when the last one returned, as one can take long on a loaded host (it
 * hands the thread's P to another thread and back): counted from when it
 * began, each call after one that took longer would go through the
 * scheduler again.
 */
#define SN_RESCHEDULE_NS 5000000

static __thread uint64_t sn_reschedule_at;

static uint64_t sn_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

/* sn_data_path returns the time it was called at. */
static uint64_t sn_data_path(void)
{
	uint64_t now = sn_now();

	if (now >= sn_reschedule_at) {
		snReschedule();
		sn_reschedule_at = sn_now() + SN_RESCHEDULE_NS;
	}
	return now;
}

/*
 * sn_poll_cq: a poll that finds nothing gives up the CPU, so as not to keep
 * it from the daemon that is to produce the completion (package nic's
 * attached CQ.Poll yields, shm.Yield). Past SN_SPIN_NS after the thread's
 * last post or completion it also naps SN_NAP_NS (plus the timer's slack,
 * 50 us by default) per empty poll, so that a thread that waits long, as a
 * bandwidth test's client with -Q 100 waits for a completion every hundred
 * messages (about 6 ms for 64 KiB messages at 1 GB/s, with 28 more queued), stops
 * taking a CPU from the daemon moving its data; a completion due within a
 * round trip, even one of a latency test's larger messages, is still taken
 * at once. (ib_write_bw -s 65536 -n 20000's client, at load 11: 24,705
 * empty polls, each yielding, before; 16,476 yielding and 634 napping
 * after.) Sleeping on the CQ's eventfd instead (nic's CQ.WaitReady with a
 * deadline), which returns when the completion comes, took ib_write_lat
 * -s 8 into a state where t_typical was 430 to 1019 us, in 3 of 23 runs
 * at load 5 to 12 (none in 18 runs of the nap, 6 of them napping after
 * 200 us; t_typical 21 to 48 us): the wakeup goes through Go's poller,
 * a thread woken to wake the caller's, and on a saturated host each round
 * trip that outlasted the spin then waited for two scheduler slices.
 */
#define SN_SPIN_NS 1000000
#define SN_NAP_NS 20000

static __thread uint64_t sn_busy_at; /* the thread's last post or completion */

static int sn_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	uint64_t now = sn_data_path();
	int got = snPollCQ(cq, n, wc);

	if (got != 0) {
		sn_busy_at = now;
	} else if (now - sn_busy_at >= SN_SPIN_NS) {
		struct timespec nap = { .tv_nsec = SN_NAP_NS };

		nanosleep(&nap, NULL);
	}
	return got;
}

static int sn_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return snReqNotifyCQ(cq, solicited_only);
}

static int sn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	sn_busy_at = sn_data_path();
	return snPostSend(qp, wr, bad);
}

static int sn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	sn_busy_at = sn_data_path();
	return snPostRecv(qp, wr, bad);
}

static int sn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	sn_busy_at = sn_data_path();
	return snPostSRQRecv(srq, wr, bad);
}

static struct ibv_mw *sn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sn_mw *mw = calloc(1, sizeof(*mw));
	int err;

	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	err = snAllocMW((struct sn_pd *)pd, mw, type);
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->mw.context = pd->context;
	mw->mw.pd = pd;
	mw->mw.type = type;
	return &mw->mw;
}

static int sn_dealloc_mw(struct ibv_mw *mw)
{
	int err = snDeallocMW((struct sn_mw *)mw);

	if (!err)
		free(mw);
	return err;
}

static int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	uint32_t key = ibv_inc_rkey(mw->rkey);
	int err = snBindMW(qp, mw, bind, key);

	if (!err)
		mw->rkey = key;
	return err;
}

static int sn_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;
	int err = snQueryPort(ctx, port, &a);

	if (err)
		return err;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sn_context *c;
	struct ibv_context *ctx;
	int p[2], err;

	if (sn_refuse("ibv_open_device"))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(p, O_CLOEXEC)) {
		free(c);
		return NULL;
	}
	fcntl(p[1], F_SETFL, O_NONBLOCK); /* the library writes one byte at most */
	ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->async_fd = p[0];
	c->async_w = p[1];
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->vctx.sz = sizeof(c->vctx);
	c->vctx.query_port = sn_query_port;
	ctx->ops.poll_cq = sn_poll_cq;
	ctx->ops.req_notify_cq = sn_req_notify_cq;
	ctx->ops.post_send = sn_post_send;
	ctx->ops.post_recv = sn_post_recv;
	ctx->ops.post_srq_recv = sn_post_srq_recv;
	ctx->ops.alloc_mw = sn_alloc_mw;
	ctx->ops.dealloc_mw = sn_dealloc_mw;
	ctx->ops.bind_mw = sn_bind_mw;
	sn_ex_ops(&c->vctx);
	err = snOpen(c);
	if (err) {
		close(p[0]);
		close(p[1]);
		free(c);
		errno = err;
		return NULL;
	}
	return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct sn_context *c = sn_context_of(ctx);

	snClose(c);
	close(ctx->async_fd);
	close(c->async_w);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return 0;
}

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return snQueryDevice(ctx, attr);
}

EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return snQueryPort(ctx, port, (struct ibv_port_attr *)attr);
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	int err = snQueryGID(ctx, port, index, gid);

	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
	struct ibv_gid_entry e = { .gid_index = index, .port_num = port, .gid_type = IBV_GID_TYPE_ROCE_V2 };
	int err;

	if (flags)
		return EINVAL;
	if (port > 255 || index > 0x7fffffff)
		return ENODATA;
	err = snQueryGID(ctx, port, index, &e.gid);
	if (err)
		return ENODATA;
	memcpy(entry, &e, size < sizeof(e) ? size : sizeof(e));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
				    size_t max, uint32_t flags, size_t size)
{
	if (flags || size < sizeof(*entries))
		return -EINVAL;
	if (max < 1)
		return -EINVAL;
	return _ibv_query_gid_ex(ctx, 1, 0, entries, 0, size) ? 0 : 1;
}

/* ibv_query_gid_type is libibverbs' private call that ibv_devinfo and
 * perftest use: the type of a GID table entry as sysfs names it. */
EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, uint32_t *type)
{
	union ibv_gid gid;

	if (snQueryGID(ctx, port, index, &gid)) {
		errno = EINVAL;
		return -1;
	}
	*type = 1; /* IBV_GID_TYPE_SYSFS_ROCE_V2 */
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return EINVAL;
	*pkey = htobe16(0xffff);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	(void)ctx;
	if (port != 1 || be16toh(pkey) != 0xffff) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct sn_pd *pd = calloc(1, sizeof(*pd));
	int err;

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	err = snAllocPD(ctx, pd);
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->pd.context = ctx;
	return &pd->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err = snDeallocPD((struct sn_pd *)pd);

	if (!err)
		free(pd);
	return err;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	struct sn_mr *mr = calloc(1, sizeof(*mr));
	int err;

	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	err = snRegMR((struct sn_pd *)pd, mr, addr, length, iova, access);
	if (err) {
		free(mr);
		errno = err;
		return NULL;
	}
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	return &mr->mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err = snDeregMR((struct sn_mr *)mr);

	if (!err)
		free(mr);
	return err;
}

/*
 * ibv_rereg_mr with libibverbs' return convention: input it refuses itself
 * is IBV_REREG_MR_ERR_INPUT, what the device refuses IBV_REREG_MR_ERR_CMD,
 * with errno set either way. The region keeps its keys, as on rxe.
 */
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	int err;

	if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	err = snReregMR((struct sn_mr *)mr, flags, (flags & IBV_REREG_MR_CHANGE_PD) ? (struct sn_pd *)pd : NULL,
			access);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct sn_channel *ch = calloc(1, sizeof(*ch));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
	int p[2], ep, err;

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		free(ch);
		return NULL;
	}
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK)) {
		err = errno;
		close(ep);
		free(ch);
		errno = err;
		return NULL;
	}
	if (epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev)) {
		err = errno;
		close(ep);
		close(p[0]);
		close(p[1]);
		free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = ctx;
	ch->ch.fd = ep;
	ch->r = p[0];
	ch->w = p[1];
	snCreateChannel(ch);
	return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sn_channel *ch = (struct sn_channel *)channel;

	if (channel->refcnt)
		return EBUSY;
	snDestroyChannel(ch);
	close(channel->fd);
	close(ch->r);
	close(ch->w);
	free(ch);
	return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct sn_cq *cq;
	int err;

	if (cqe < 0 || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	err = snCreateCQ(ctx, cq, cqe);
	if (err) {
		free(cq);
		errno = err;
		return NULL;
	}
	if (channel) {
		err = snAddCQ((struct sn_channel *)channel, cq);
		if (err) {
			snDestroyCQ(cq);
			free(cq);
			errno = err;
			return NULL;
		}
	}
	cq->cq.context = ctx;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_mutex_init(&cq->poll_mu, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (channel) {
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	return &cq->cq;
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	return snResizeCQ((struct sn_cq *)cq, cqe);
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sn_cq *cq = (struct sn_cq *)ibcq;
	struct ibv_comp_channel *channel = ibcq->channel;
	int err = snDestroyCQ(cq);

	if (err)
		return err;
	if (channel) {
		pthread_mutex_lock(&ibcq->context->mutex);
		channel->refcnt--;
		pthread_mutex_unlock(&ibcq->context->mutex);
	}
	/* As libibverbs: wait until the program acked every event it got. */
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->comp_events_completed != cq->events)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	pthread_mutex_destroy(&ibcq->mutex);
	pthread_mutex_destroy(&cq->poll_mu);
	pthread_cond_destroy(&ibcq->cond);
	free(cq);
	return 0;
}

/* sn_read_pipe takes the next event libsoftnic raised itself, NULL if
 * another thread took it first. */
static struct sn_cq *sn_read_pipe(struct sn_channel *ch)
{
	struct sn_cq *cq;

	if (read(ch->r, &cq, sizeof(cq)) != sizeof(cq))
		return NULL;
	__atomic_sub_fetch(&ch->pending, 1, __ATOMIC_RELEASE);
	return cq;
}

/* sn_take_event takes the event of ev, which the channel's epoll set
 * reported: NULL if there was none after all (events.go). */
static struct sn_cq *sn_take_event(struct sn_channel *ch, struct epoll_event *ev)
{
	return ev->data.u64 ? snTakeWakeup(ch, (uintptr_t)ev->data.u64) : sn_read_pipe(ch);
}

/* sn_poll_channel sets *cq to the CQ of the channel's next event, or
 * fails with EAGAIN if the channel holds none: a non-blocking channel's
 * ibv_get_cq_event, which a program calls when poll or epoll found the
 * channel readable. */
static int sn_poll_channel(struct sn_channel *ch, struct sn_cq **cq)
{
	struct epoll_event ev;
	int n;

	do {
		n = epoll_wait(ch->ch.fd, &ev, 1, 0);
		if (n == 0)
			errno = EAGAIN;
		if (n <= 0)
			return -1;
	} while (!(*cq = sn_take_event(ch, &ev)));
	return 0;
}

/*
 * sn_wait_channel sets *cq to the CQ of the channel's next event (events.go
 * says where events come from): a blocking channel's ibv_get_cq_event. It
 * first watches the channel's armed CQs for a while (snWatchChannel), then
 * sleeps on the channel's epoll set. It watches with the program's signals
 * blocked, and sleeps in epoll_pwait with the program's mask back: a
 * signal that comes while it watches is not lost but ends the wait (-1,
 * EINTR), as one that comes while it sleeps, as with libibverbs (qperf's
 * alarm ends its test so). Not SIGURG, which the Go runtime sends a thread
 * running Go code to preempt it: one sent while the thread watched waits
 * until the wait is over, when the runtime's handler ignores it, instead
 * of ending the wait with an EINTR the program did not cause (qperf's
 * rc_lat failed so).
 */
static int sn_wait_channel(struct sn_channel *ch, struct sn_cq **cq)
{
	sigset_t all, mask, wait_mask;
	struct epoll_event ev;
	int rc = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &mask);
	wait_mask = mask;
	sigaddset(&wait_mask, SIGURG);
	*cq = snWatchChannel(ch);
	while (!*cq) {
		if (epoll_pwait(ch->ch.fd, &ev, 1, -1, &wait_mask) < 0) {
			rc = -1;
			break;
		}
		*cq = sn_take_event(ch, &ev);
	}
	pthread_sigmask(SIG_SETMASK, &mask, NULL);
	return rc;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cqp, void **cq_context)
{
	struct sn_channel *ch = (struct sn_channel *)channel;
	struct sn_cq *cq;

	if (sn_refuse("ibv_get_cq_event"))
		return -1;
	if (fcntl(channel->fd, F_GETFL) & O_NONBLOCK ? sn_poll_channel(ch, &cq) : sn_wait_channel(ch, &cq))
		return -1;
	pthread_mutex_lock(&cq->cq.mutex);
	cq->events++;
	pthread_mutex_unlock(&cq->cq.mutex);
	*cqp = &cq->cq;
	*cq_context = cq->cq.cq_context;
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct sn_srq *srq = calloc(1, sizeof(*srq));
	int err;

	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	err = snCreateSRQ((struct sn_pd *)pd, srq, attr);
	if (err) {
		free(srq);
		errno = err;
		return NULL;
	}
	srq->srq.context = pd->context;
	srq->srq.srq_context = attr->srq_context;
	srq->srq.pd = pd;
	pthread_mutex_init(&srq->srq.mutex, NULL);
	pthread_cond_init(&srq->srq.cond, NULL);
	return &srq->srq;
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	return snModifySRQ((struct sn_srq *)srq, attr, mask);
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	snQuerySRQ((struct sn_srq *)srq, attr);
	return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	uint32_t read;
	int err = snDestroySRQ((struct sn_srq *)srq, &read);

	if (err)
		return err;
	/* As libibverbs: wait until the program acked every event it got. */
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != read)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(srq);
	return 0;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct sn_qp *qp = calloc(1, sizeof(*qp));
	int err;

	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	/* Ready for ibv_ack_async_event before the QP can have an event. */
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	qp->qp.context = pd->context;
	err = snCreateQP((struct sn_pd *)pd, qp, attr);
	if (err) {
		pthread_mutex_destroy(&qp->qp.mutex);
		pthread_cond_destroy(&qp->qp.cond);
		free(qp);
		errno = err;
		return NULL;
	}
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq ? attr->recv_cq : attr->send_cq;
	qp->qp.srq = attr->srq;
	qp->qp.state = IBV_QPS_RESET;
	qp->qp.qp_type = attr->qp_type;
	qp->cap = attr->cap;
	return &qp->qp;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return snModifyQP(qp, attr, mask);
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	int err;

	(void)mask;
	err = snQueryQP(qp, attr);
	if (err)
		return err;
	attr->cap = ((struct sn_qp *)qp)->cap;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->qp_type = qp->qp_type;
		init->cap = attr->cap;
	}
	return 0;
}

/* Multicast (mcast.go): RoCE has no LIDs, which rxe ignores too. */
EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	return snMcast((struct sn_qp *)qp, (uint8_t *)gid->raw, 1);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	return snMcast((struct sn_qp *)qp, (uint8_t *)gid->raw, 0);
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	uint32_t read;
	int err = snDestroyQP((struct sn_qp *)qp, &read);

	if (err)
		return err;
	/* As libibverbs: the events the program read must be acknowledged. */
	pthread_mutex_lock(&qp->mutex);
	while (qp->events_completed != read)
		pthread_cond_wait(&qp->cond, &qp->mutex);
	pthread_mutex_unlock(&qp->mutex);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	sn_free_wrs((struct sn_qp *)qp);
	free(qp);
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sn_ah *ah = calloc(1, sizeof(*ah));
	int err;

	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	err = snCreateAH((struct sn_pd *)pd, ah, attr);
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	return &ah->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	free(ah);
	return 0;
}

/* ibv_init_ah_from_wc: the address vector back to the sender of a UD
 * receive, whose GRH (the IP header, as RoCEv2 puts it) is in grh. */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
			       struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	(void)ctx;
	memset(ah, 0, sizeof(*ah));
	ah->port_num = port;
	if (!(wc->wc_flags & IBV_WC_GRH) || !grh) {
		errno = EINVAL;
		return -1;
	}
	ah->is_global = 1;
	/* The sender's address, and the hop limit and traffic class the
	 * datagram came with, as libibverbs takes them from the header. */
	if ((((const uint8_t *)grh)[20] >> 4) == 4) {
		/* An IPv4 header in the last 20 bytes of the GRH space. */
		const uint8_t *ip = (const uint8_t *)grh + 20;

		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
		memcpy(&ah->grh.dgid.raw[12], ip + 12, 4);
		ah->grh.traffic_class = ip[1];
		ah->grh.hop_limit = ip[8];
	} else {
		uint32_t flow = be32toh(grh->version_tclass_flow);

		ah->grh.dgid = grh->sgid;
		ah->grh.traffic_class = (flow >> 20) & 0xff;
		ah->grh.flow_label = flow & 0xfffff;
		ah->grh.hop_limit = grh->hop_limit;
	}
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct sn_async_event e;
	int got;

	while ((got = snNextAsyncEvent(ctx, &e)) <= 0) {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };

		if (got < 0) {
			errno = EIO;
			return -1;
		}

		if (fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		if (poll(&p, 1, -1) < 0) /* EINTR too, as with libibverbs */
			return -1;
	}
	memset(event, 0, sizeof(*event));
	event->event_type = e.type;
	switch (e.type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = e.obj;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = e.obj;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
		event->element.port_num = 1;
		break;
	default:
		event->element.qp = e.obj;
	}
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	struct ibv_qp *qp = event->element.qp;
	struct ibv_srq *srq = event->element.srq;

	switch (event->event_type) {
	case IBV_EVENT_QP_FATAL:
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		break;
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		break;
	default:
		break;
	}
}

EXPORT int ibv_fork_init(void)
{
	/* Registered pages are MADV_DONTFORK already (see package pages). */
	return 0;
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_ENABLED;
}

EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

EXPORT void ibv_register_driver(const char *name, void *init)
{
	(void)name;
	(void)init;
}

/* The drivers of the libmlx5 and libefa this library stands in for do not
 * load, and have nothing to register. */
EXPORT void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	(void)dir;
	(void)file;
	(void)buf;
	(void)size;
	errno = ENOENT;
	return -1;
}

EXPORT int ibv_get_sysfs_path(char *buf, size_t size)
{
	(void)buf;
	(void)size;
	return -1;
}
