/*
 * The man pages of ../shared/seeds, checked through libsoftnic with the
 * calls a C program makes: seed 001's registration rules (REMOTE_WRITE
 * or REMOTE_ATOMIC without LOCAL_WRITE is EINVAL, ibv_dereg_mr fails
 * with EBUSY while a memory window is bound, ZERO_BASED regions are
 * addressed from 0), memory a program owns (malloc'd, stack, a private
 * file mapping) registered where it lies, a bad rkey completing with
 * IBV_WC_REM_ACCESS_ERR and raising IBV_EVENT_QP_FATAL for both QPs
 * (ibv_get_async_event), seed 002's rdma_post_read, whose context comes
 * back as the completion's wr_id, over a connection whose two QPs have the
 * local ACK timeouts rdma_set_option set, an SRQ's limit (ibv_modify_srq arms
 * it, SENDs that take the SRQ below it raise one
 * IBV_EVENT_SRQ_LIMIT_REACHED, ibv_query_srq shows it disarmed, and
 * ibv_destroy_srq takes back its event not read), ibv_resize_cq up and
 * down, ibv_req_notify_cq for solicited completions only and for the
 * next completion, ibv_get_cq_event's events (once each, blocking or
 * not) and a signal ending its wait, ibv_destroy_qp
 * taking the QP's completions out of its CQ, rdma_migrate_id moving an
 * id's event not yet read to the new channel, and a synchronous id to a
 * channel and back, waiting for the acknowledgement of an event read,
 * ibv_rereg_mr changing a region's access and PD under a peer's WRITEs,
 * rdma_getaddrinfo taking its hints' addresses, rdma_listen on port 0
 * picking a port, which rdma_get_src_port gives between rdma_bind_addr
 * and rdma_listen (a connection to it meanwhile rejected), rdma_destroy_id
 * dropping its events not yet read and waiting for those read to be
 * acknowledged, ibv_query_device_ex, an
 * extended CQ (ibv_create_cq_ex) polled with start_poll, next_poll and
 * end_poll, an extended QP's ibv_wr_* API (ibv_create_qp_ex and
 * rdma_create_qp_ex), a UD datagram's traffic class given back by
 * ibv_init_ah_from_wc, a forked child refused at once, and multicast: the
 * errnos of ibv_attach_mcast and ibv_detach_mcast (as rxe's) and of
 * rdma_join_multicast_ex and rdma_leave_multicast (as librdmacm's), and
 * the MULTICAST_JOIN event of a UDP id, which a datagram to the group
 * then reaches.
 *
 * Usage: libsoftnic_seeds IP PORT FILE, where IP is the daemon's address,
 * PORT a free rdma_cm port and FILE a scratch file. Each check prints a
 * line; the exit status is 0 only if every check passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "check.h"

#define MUST(x)                                                                 \
	do {                                                                    \
		if (!(x)) {                                                     \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, strerror(errno)); \
			exit(2);                                                \
		}                                                               \
	} while (0)

static struct ibv_context *ctx;
static union ibv_gid gid;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qa, *qb; /* connected to each other */

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	MUST(qp);
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.port_num = 1;
	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

/* connect_qps (re)connects qa and qb, which a remote access error leaves
 * in the error state. */
static void connect_qps(void)
{
	struct ibv_wc wc;

	connect_qp(qa, qb->qp_num, &gid);
	connect_qp(qb, qa->qp_num, &gid);
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
}

/* wait_wc polls cq for one completion, for at most ten seconds. */
static struct ibv_wc wait_wc(void)
{
	struct ibv_wc wc;

	for (int i = 0; i < 10000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);

		MUST(n >= 0);
		if (n == 1)
			return wc;
		if (i % 1000 == 999)
			usleep(1000);
	}
	fprintf(stderr, "no completion\n");
	exit(2);
}

/* rdma posts one RDMA operation on qa from local (lkey) to remote. */
static struct ibv_wc rdma(enum ibv_wr_opcode op, void *local, uint32_t len, uint32_t lkey, uint64_t remote, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	MUST(!ibv_post_send(qa, &wr, &bad));
	return wait_wc();
}

static void registration_rules(struct ibv_mr *src)
{
	char buf[64];
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE);
	CHECK(!mr && errno == EINVAL, "seed 001: REMOTE_WRITE without LOCAL_WRITE is EINVAL");
	errno = 0;
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
	CHECK(!mr && errno == EINVAL, "seed 001: REMOTE_ATOMIC without LOCAL_WRITE is EINVAL");

	/* A window bound to a region keeps it registered. */
	char *wbuf = malloc(4096);
	struct ibv_mr *wmr = ibv_reg_mr(pd, wbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	MUST(wmr);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	MUST(mw);
	struct ibv_mw_bind bind = { .wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
				    .bind_info = { .mr = wmr, .addr = (uintptr_t)wbuf, .length = 4096,
						   .mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	MUST(!ibv_bind_mw(qa, mw, &bind));
	struct ibv_wc wc = wait_wc();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 11, "ibv_bind_mw completes (%s)",
	      ibv_wc_status_str(wc.status));
	strcpy(wbuf, "through the window");
	wc = rdma(IBV_WR_RDMA_READ, src->addr, 19, src->lkey, (uintptr_t)wbuf, mw->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(src->addr, "through the window"), "a READ through the window's rkey");
	int err = ibv_dereg_mr(wmr);
	CHECK(err == EBUSY, "seed 001: ibv_dereg_mr fails with EBUSY while a window is bound (got %d)", err);
	MUST(!ibv_dealloc_mw(mw));
	err = ibv_dereg_mr(wmr);
	CHECK(err == 0, "ibv_dereg_mr succeeds once the window is gone (got %d)", err);
	free(wbuf);

	/* ZERO_BASED: the peer addresses the region from 0. */
	char *zbuf = calloc(1, 4096);
	struct ibv_mr *zmr = ibv_reg_mr(pd, zbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED);
	MUST(zmr);
	strcpy(src->addr, "zero-based");
	wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 11, src->lkey, 100, zmr->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(zbuf + 100, "zero-based"), "seed 001: ZERO_BASED: a WRITE at offset 100 lands at byte 100");
	wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 11, src->lkey, (uintptr_t)zbuf + 100, zmr->rkey);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "seed 001: ZERO_BASED: the buffer's virtual address is outside the region (%s)",
	      ibv_wc_status_str(wc.status));
	connect_qps();
	ibv_dereg_mr(zmr);
	free(zbuf);
}

/* The memory a program owns, registered where it lies. */
static void program_memory(struct ibv_mr *src, const char *file)
{
	char stack[512];
	char *heap = malloc(100000);
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);

	MUST(heap && fd >= 0 && !ftruncate(fd, 8192));
	char *priv = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	char *shared = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	MUST(priv != MAP_FAILED && shared != MAP_FAILED);
	struct { const char *what; char *buf; size_t len; } cases[] = {
		{ "a buffer on the stack", stack, sizeof(stack) },
		{ "malloc'd memory", heap + 50000, 1000 },
		{ "a MAP_PRIVATE file mapping", priv + 4000, 200 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(cases[i].buf, 'x', cases[i].len);
		struct ibv_mr *mr = ibv_reg_mr(pd, cases[i].buf, cases[i].len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		MUST(mr);
		snprintf(src->addr, 64, "written into %s", cases[i].what);
		struct ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, src->addr, strlen(src->addr) + 1, src->lkey,
					(uintptr_t)cases[i].buf + 10, mr->rkey);
		CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(cases[i].buf + 10, src->addr) && cases[i].buf[9] == 'x',
		      "a WRITE into %s, registered where it lies", cases[i].what);
		MUST(!ibv_dereg_mr(mr));
		CHECK(!strcmp(cases[i].buf + 10, src->addr), "%s keeps its bytes after ibv_dereg_mr", cases[i].what);
	}
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, shared, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!mr && errno == EOPNOTSUPP, "a MAP_SHARED file mapping is refused with EOPNOTSUPP");
	munmap(priv, 8192);
	munmap(shared, 8192);
	close(fd);
	free(heap);
}

/* next_async_event waits up to timeout_ms for an asynchronous event,
 * which it acknowledges; it returns 0 if none came. */
static int next_async_event(struct ibv_async_event *ev, int timeout_ms)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };

	for (;;) {
		if (!ibv_get_async_event(ctx, ev)) {
			ibv_ack_async_event(ev);
			return 1;
		}
		MUST(errno == EAGAIN);
		if (poll(&p, 1, timeout_ms) <= 0)
			return 0;
	}
}

/* A bad rkey: the requester's completion is IBV_WC_REM_ACCESS_ERR, and
 * both QPs, the requester and the responder, go to the error state, each
 * with an IBV_EVENT_QP_FATAL. */
static void bad_rkey(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_async_event ev;
	int fatal_a = 0, fatal_b = 0, others = 0;

	/* The earlier checks' remote access errors raised events too. */
	MUST(!fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK));
	while (next_async_event(&ev, 0))
		;
	struct ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 8, src->lkey, (uintptr_t)dst->addr, dst->rkey + 1);

	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "a WRITE with a bad rkey completes with IBV_WC_REM_ACCESS_ERR (%s)",
	      ibv_wc_status_str(wc.status));
	while (fatal_a + fatal_b + others < 2 && next_async_event(&ev, 10000)) {
		if (ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == qa)
			fatal_a++;
		else if (ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == qb)
			fatal_b++;
		else
			others++;
	}
	CHECK(fatal_a == 1 && fatal_b == 1 && others == 0,
	      "the bad rkey raises IBV_EVENT_QP_FATAL for the requester's QP and the responder's (%d, %d, %d others)",
	      fatal_a, fatal_b, others);
	connect_qps();
	CHECK(!next_async_event(&ev, 100), "no event after the QPs are connected again");
}

/* Seed 002: rdma_post_read on a connected rdma_cm_id. */
static const char *cm_ip, *cm_port;
static char server_buf[256] = "read by rdma_post_read";
static struct ibv_mr *server_mr;
static pthread_mutex_t server_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t server_cond = PTHREAD_COND_INITIALIZER;
static int server_ready, server_done, server_notify;
static uint8_t server_timeout; /* the accepted QP's local ACK timeout */
static uint8_t server_tclass;  /* and its address vector's traffic class */

/* qp_timeout returns the local ACK timeout of qp (ibv_query_qp). */
static uint8_t qp_timeout(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;

	MUST(!ibv_query_qp(qp, &a, IBV_QP_TIMEOUT, &init));
	return a.timeout;
}

/* qp_tclass returns the traffic class of qp's address vector. */
static uint8_t qp_tclass(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;

	MUST(!ibv_query_qp(qp, &a, IBV_QP_AV, &init));
	return a.ah_attr.grh.traffic_class;
}

static void *server(void *arg)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
					 .sq_sig_all = 1 };
	struct rdma_cm_id *listen, *id;

	(void)arg;
	MUST(!rdma_getaddrinfo(cm_ip, cm_port, &hints, &res));
	MUST(!rdma_create_ep(&listen, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	MUST(!rdma_listen(listen, 1));
	pthread_mutex_lock(&server_mu);
	server_ready = 1;
	pthread_cond_signal(&server_cond);
	pthread_mutex_unlock(&server_mu);
	MUST(!rdma_get_request(listen, &id));
	server_mr = ibv_reg_mr(id->pd, server_buf, sizeof(server_buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	MUST(server_mr);
	uint8_t timeout = 12;
	MUST(!rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout)));
	MUST(!rdma_accept(id, NULL));
	int notified = rdma_notify(id, IBV_EVENT_COMM_EST) ? errno : 0;
	pthread_mutex_lock(&server_mu);
	server_notify = notified;
	server_timeout = qp_timeout(id->qp);
	server_tclass = qp_tclass(id->qp);
	pthread_cond_signal(&server_cond);
	pthread_mutex_unlock(&server_mu);
	pthread_mutex_lock(&server_mu);
	while (!server_done)
		pthread_cond_wait(&server_cond, &server_mu);
	pthread_mutex_unlock(&server_mu);
	rdma_disconnect(id);
	rdma_dereg_mr(server_mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen);
	return NULL;
}

static void post_read(void)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_cm_id *id;
	pthread_t t;
	char buf[256] = "";
	struct ibv_wc wc;

	MUST(!pthread_create(&t, NULL, server, NULL));
	pthread_mutex_lock(&server_mu);
	while (!server_ready)
		pthread_cond_wait(&server_cond, &server_mu);
	pthread_mutex_unlock(&server_mu);
	MUST(!rdma_getaddrinfo(cm_ip, cm_port, &hints, &res));
	MUST(!rdma_create_ep(&id, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	struct ibv_mr *mr = rdma_reg_read(id, buf, sizeof(buf));
	MUST(mr);
	uint8_t timeout = 32;
	int wide = 10;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout)) == -1 &&
		      errno == EINVAL,
	      "RDMA_OPTION_ID_ACK_TIMEOUT 32 is EINVAL");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &wide, sizeof(wide)) == -1 && errno == EINVAL,
	      "RDMA_OPTION_ID_ACK_TIMEOUT of an int's length is EINVAL");
	timeout = 10;
	MUST(!rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout)));
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &wide, sizeof(wide)) == -1 && errno == EINVAL,
	      "RDMA_OPTION_ID_TOS of an int's length is EINVAL");
	uint8_t tos = 0xb8; /* DSCP 46, expedited forwarding */
	MUST(!rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)));
	CHECK(rdma_notify(id, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL, "rdma_notify before a connection is EINVAL");
	MUST(!rdma_connect(id, NULL));
	CHECK(rdma_notify(id, IBV_EVENT_COMM_EST) == -1 && errno == EISCONN,
	      "rdma_notify of IBV_EVENT_COMM_EST on a connection established is EISCONN");
	CHECK(rdma_notify(id, IBV_EVENT_LID_CHANGE) == -1 && errno == EINVAL,
	      "rdma_notify of another event is EINVAL (no alternate path)");
	void *context = (void *)(uintptr_t)0x5eed0002;
	MUST(!rdma_post_read(id, context, buf, 23, mr, IBV_SEND_SIGNALED, (uintptr_t)server_buf, server_mr->rkey));
	int n = rdma_get_send_comp(id, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ,
	      "seed 002: rdma_post_read completes (%s)", ibv_wc_status_str(wc.status));
	CHECK(wc.wr_id == (uintptr_t)context, "seed 002: the context comes back as the completion's wr_id (%#llx)",
	      (unsigned long long)wc.wr_id);
	CHECK(!strcmp(buf, server_buf), "seed 002: the READ brought the remote bytes");
	pthread_mutex_lock(&server_mu);
	while (!server_timeout) /* rdma_accept may return after the READ */
		pthread_cond_wait(&server_cond, &server_mu);
	pthread_mutex_unlock(&server_mu);
	CHECK(qp_timeout(id->qp) == 10 && server_timeout == 12,
	      "RDMA_OPTION_ID_ACK_TIMEOUT sets each side's QP's local ACK timeout (%d, want 10; %d, want 12)",
	      qp_timeout(id->qp), server_timeout);
	CHECK(qp_tclass(id->qp) == tos && server_tclass == tos,
	      "RDMA_OPTION_ID_TOS is the traffic class of both QPs, the acceptor's from the REQ (%#x and %#x, want %#x)",
	      qp_tclass(id->qp), server_tclass, tos);
	CHECK(server_notify == EISCONN, "rdma_notify after rdma_accept is EISCONN (%d)", server_notify);
	pthread_mutex_lock(&server_mu);
	server_done = 1;
	pthread_cond_signal(&server_cond);
	pthread_mutex_unlock(&server_mu);
	rdma_disconnect(id);
	CHECK(rdma_notify(id, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL, "rdma_notify after rdma_disconnect is EINVAL");
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	pthread_join(t, NULL);
}

/* peer_qp makes a QP whose receives complete to rcq (from srq, if set)
 * and connects qa to it. */
static struct ibv_qp *peer_qp(struct ibv_cq *rcq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	MUST(qp);
	connect_qp(qa, qp->qp_num, &gid);
	connect_qp(qp, qa->qp_num, &gid);
	return qp;
}

/* post_recvs posts n receives of 64 bytes of mr, with wr_ids from *id
 * on, to srq, or to qp's own queue. */
static void post_recvs(struct ibv_srq *srq, struct ibv_qp *qp, struct ibv_mr *mr, int n, uint64_t *id)
{
	for (int i = 0; i < n; i++, (*id)++) {
		struct ibv_sge sge = { .addr = (uintptr_t)mr->addr + *id % 64 * 64, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = *id, .sg_list = &sge, .num_sge = 1 }, *bad;

		MUST(srq ? !ibv_post_srq_recv(srq, &wr, &bad) : !ibv_post_recv(qp, &wr, &bad));
	}
}

/* post_and_wait posts wr, signaled, on qp, whose send CQ is cq, and waits
 * for its successful completion, which comes once the receiver's has been
 * written. */
static void post_and_wait(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	MUST(!ibv_post_send(qp, wr, &bad));
	for (;;) {
		struct ibv_wc wc = wait_wc();

		if (wc.wr_id == wr->wr_id) {
			MUST(wc.status == IBV_WC_SUCCESS);
			return;
		}
	}
}

/* send_flags_from_qa sends 8 bytes of src from qa with flags and waits
 * for the SEND's completion, which comes once the receiver's has been
 * written. */
static void send_flags_from_qa(struct ibv_mr *src, unsigned int flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = 8, .lkey = src->lkey };
	struct ibv_send_wr wr = { .wr_id = 0x5e4d, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | flags };

	post_and_wait(qa, &wr);
}

static void send_from_qa(struct ibv_mr *src)
{
	send_flags_from_qa(src, 0);
}

/* srq_attr_is checks what ibv_query_srq answers. */
static void srq_attr_is(struct ibv_srq *srq, uint32_t max_wr, uint32_t limit, const char *when)
{
	struct ibv_srq_attr attr = { .srq_limit = 99 };

	CHECK(!ibv_query_srq(srq, &attr) && attr.max_wr == max_wr && attr.max_sge == 2 && attr.srq_limit == limit,
	      "ibv_query_srq %s: max_wr %u, max_sge %u, srq_limit %u", when, attr.max_wr, attr.max_sge, attr.srq_limit);
}

/* An SRQ's limit: ibv_modify_srq arms it (what rxe refuses is EINVAL,
 * changing nothing); the SEND that takes the SRQ's receives below it
 * raises one IBV_EVENT_SRQ_LIMIT_REACHED for the SRQ and disarms it;
 * IBV_SRQ_MAX_WR resizes the SRQ; ibv_destroy_srq takes back its event
 * not read. */
static void srq_limit(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_srq_init_attr init = { .attr = { .max_wr = 16, .max_sge = 2 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &init);
	struct ibv_async_event ev;
	uint64_t id = 0;

	MUST(srq);
	MUST(!fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK));
	srq_attr_is(srq, 16, 0, "as created");
	struct ibv_qp *qs = peer_qp(cq, srq);
	post_recvs(srq, NULL, dst, 4, &id);
	struct { const char *what; struct ibv_srq_attr attr; int mask; } bad[] = {
		{ "a limit past max_wr", { .srq_limit = 17 }, IBV_SRQ_LIMIT },
		{ "max_wr below the receives posted", { .max_wr = 3 }, IBV_SRQ_MAX_WR },
		{ "max_wr 0", { .max_wr = 0 }, IBV_SRQ_MAX_WR },
		{ "a limit past the new max_wr", { .max_wr = 8, .srq_limit = 9 }, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = ibv_modify_srq(srq, &bad[i].attr, bad[i].mask);

		CHECK(err == EINVAL, "ibv_modify_srq with %s is EINVAL (got %d)", bad[i].what, err);
	}
	srq_attr_is(srq, 16, 0, "after the refused modifies");
	struct ibv_srq_attr arm = { .srq_limit = 3 };
	CHECK(!ibv_modify_srq(srq, &arm, IBV_SRQ_LIMIT), "ibv_modify_srq arms a limit of 3 over 4 receives");
	srq_attr_is(srq, 16, 3, "armed");
	send_from_qa(src);
	CHECK(!next_async_event(&ev, 100), "no event with 3 receives left, limit 3");
	send_from_qa(src);
	int got = next_async_event(&ev, 10000);
	CHECK(got && ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "2 receives left, limit 3: IBV_EVENT_SRQ_LIMIT_REACHED for the SRQ (%s)",
	      got ? ibv_event_type_str(ev.event_type) : "none");
	srq_attr_is(srq, 16, 0, "once the limit was reached");
	send_from_qa(src);
	CHECK(!next_async_event(&ev, 100), "no event again without the limit armed again");

	struct ibv_srq_attr grow = { .max_wr = 32 };
	CHECK(!ibv_modify_srq(srq, &grow, IBV_SRQ_MAX_WR), "ibv_modify_srq resizes the SRQ to 32");
	srq_attr_is(srq, 32, 0, "resized");
	post_recvs(srq, NULL, dst, 31, &id);
	struct ibv_recv_wr more = { .wr_id = 99 }, *badwr;
	CHECK(ibv_post_srq_recv(srq, &more, &badwr) == ENOMEM, "the SRQ resized to 32 takes 32 receives");

	/* A limit reached, its event not read: ibv_destroy_srq takes it back. */
	arm.srq_limit = 32;
	MUST(!ibv_modify_srq(srq, &arm, IBV_SRQ_LIMIT));
	send_from_qa(src);
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "the limit of 32 reached: an event waits");
	MUST(!ibv_destroy_qp(qs));
	CHECK(!ibv_destroy_srq(srq), "ibv_destroy_srq with an event not read");
	CHECK(!next_async_event(&ev, 100), "ibv_destroy_srq took back the SRQ's event not read");
	connect_qps();
}

/* ibv_resize_cq: a CQ holding 3 completions cannot shrink below them
 * (EINVAL, as rxe); grown, it keeps them in order; shrunk, it holds what
 * its new size says, cq->cqe the size asked for. */
static void resize_cq(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_cq *rcq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_device_attr dev;
	struct ibv_wc wc[8];
	uint64_t id = 0;

	MUST(rcq && !ibv_query_device(ctx, &dev));
	struct ibv_qp *qr = peer_qp(rcq, NULL);
	post_recvs(NULL, qr, dst, 4, &id);
	for (int i = 0; i < 3; i++)
		send_from_qa(src);
	int sizes[] = { 2, 0, dev.max_cqe + 1 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int err = ibv_resize_cq(rcq, sizes[i]);

		CHECK(err == EINVAL && rcq->cqe == 4, "ibv_resize_cq to %d holding 3 completions is EINVAL (got %d)", sizes[i], err);
	}
	CHECK(!ibv_resize_cq(rcq, 16) && rcq->cqe == 16, "ibv_resize_cq grows the CQ to 16 (cqe %d)", rcq->cqe);
	int n = ibv_poll_cq(rcq, 8, wc);
	CHECK(n == 3 && wc[0].wr_id == 0 && wc[1].wr_id == 1 && wc[2].wr_id == 2 && wc[2].opcode == IBV_WC_RECV,
	      "the grown CQ keeps its 3 completions in order (%d)", n);
	CHECK(!ibv_resize_cq(rcq, 1) && rcq->cqe == 1, "ibv_resize_cq shrinks the empty CQ to 1 (cqe %d)", rcq->cqe);
	send_from_qa(src);
	n = ibv_poll_cq(rcq, 8, wc);
	CHECK(n == 1 && wc[0].wr_id == 3 && wc[0].status == IBV_WC_SUCCESS, "the shrunk CQ holds the next completion (%d)", n);
	MUST(!ibv_destroy_qp(qr));
	MUST(!ibv_destroy_cq(rcq));
	connect_qps();
}

/* event_cq is a CQ with a completion channel, and a QP connected to qa
 * whose receives complete to it. */
struct event_cq {
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct event_cq open_event_cq(struct ibv_mr *dst, int recvs)
{
	struct event_cq e = { .ch = ibv_create_comp_channel(ctx) };
	uint64_t id = 0;

	e.cq = e.ch ? ibv_create_cq(ctx, 16, NULL, e.ch, 0) : NULL;
	MUST(e.cq);
	e.qp = peer_qp(e.cq, NULL);
	post_recvs(NULL, e.qp, dst, recvs, &id);
	return e;
}

/* cq_event waits up to ms for the CQ's event and, if it came, reads and
 * acknowledges it; it is 1 if it came. */
static int cq_event(struct event_cq *e, int ms)
{
	struct pollfd p = { .fd = e->ch->fd, .events = POLLIN };
	struct ibv_cq *got;
	void *got_ctx;

	if (poll(&p, 1, ms) != 1)
		return 0;
	MUST(!ibv_get_cq_event(e->ch, &got, &got_ctx) && got == e->cq);
	ibv_ack_cq_events(e->cq, 1);
	return 1;
}

static void close_event_cq(struct event_cq *e)
{
	MUST(!ibv_destroy_qp(e->qp));
	MUST(!ibv_destroy_cq(e->cq));
	MUST(!ibv_destroy_comp_channel(e->ch));
	connect_qps();
}

/* ibv_req_notify_cq with solicited_only: SENDs without IBV_SEND_SOLICITED
 * raise no event, the next with it does; armed for any completion again,
 * the CQ raises one for a plain SEND. */
static void solicited_events(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct event_cq e = open_event_cq(dst, 4);
	struct ibv_wc wc[8];

	MUST(!ibv_req_notify_cq(e.cq, 1));
	send_from_qa(src);
	send_from_qa(src);
	CHECK(!cq_event(&e, 100), "armed for solicited completions only, two SENDs not solicited raise no event");
	send_flags_from_qa(src, IBV_SEND_SOLICITED);
	CHECK(cq_event(&e, 2000), "a solicited SEND raises the event");
	int n = ibv_poll_cq(e.cq, 8, wc);
	CHECK(n == 3 && wc[0].wr_id == 0 && wc[2].wr_id == 2 && wc[2].status == IBV_WC_SUCCESS,
	      "the CQ holds the three receive completions, in order (%d)", n);
	MUST(!ibv_req_notify_cq(e.cq, 1));
	MUST(!ibv_req_notify_cq(e.cq, 0));
	send_from_qa(src);
	CHECK(cq_event(&e, 2000), "armed for solicited completions, then for any, a SEND not solicited raises the event");
	MUST(ibv_poll_cq(e.cq, 8, wc) == 1);
	close_event_cq(&e);
}

/* ibv_req_notify_cq arms the CQ for its next completion: one already in
 * the CQ raises no event, one written after the arming does, though the
 * program polled it before reading the event. */
static void notify_next_completion(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct event_cq e = open_event_cq(dst, 3);
	struct ibv_wc wc[8];

	MUST(!ibv_req_notify_cq(e.cq, 0));
	send_from_qa(src);
	CHECK(cq_event(&e, 2000), "a SEND after the arming raises the event");
	MUST(!ibv_req_notify_cq(e.cq, 0));
	CHECK(!cq_event(&e, 100), "armed again before polling, the completion in the CQ raises no event");
	send_from_qa(src);
	int n = ibv_poll_cq(e.cq, 8, wc);
	CHECK(n == 2, "the CQ holds both receive completions (%d)", n);
	CHECK(cq_event(&e, 2000), "the SEND after the second arming raises the event, though its completion was polled");
	close_event_cq(&e);
}

/* get_cq_event reads the channel's next event with ibv_get_cq_event,
 * blocking unless the program made the channel non-blocking, and
 * acknowledges it; it returns what ibv_get_cq_event did. */
static int get_cq_event(struct event_cq *e)
{
	struct ibv_cq *got;
	void *got_ctx;
	int rc = ibv_get_cq_event(e->ch, &got, &got_ctx);

	if (rc == 0) {
		MUST(got == e->cq);
		ibv_ack_cq_events(e->cq, 1);
	}
	return rc;
}

/* later_send sends from qa 20 ms from now, after a blocking
 * ibv_get_cq_event stopped watching the CQs and sleeps. */
static void *later_send(void *src)
{
	struct timespec t = { .tv_nsec = 20000000 };

	nanosleep(&t, NULL);
	send_from_qa(src);
	return NULL;
}

/* A blocking ibv_get_cq_event returns the event whether the completion
 * comes while it watches the channel's CQs or after it fell asleep on the
 * channel, and each event once; a non-blocking channel with no event
 * fails at once with EAGAIN. */
static void wait_for_event(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct event_cq e = open_event_cq(dst, 3);
	struct ibv_wc wc[8];
	pthread_t t;
	uint64_t id = 100;
	int failed = 0;

	MUST(!ibv_req_notify_cq(e.cq, 0));
	send_from_qa(src);
	CHECK(get_cq_event(&e) == 0, "a blocking ibv_get_cq_event returns the event of a completion already written");
	CHECK(!cq_event(&e, 100), "the event ibv_get_cq_event returned is not raised again");
	MUST(ibv_poll_cq(e.cq, 8, wc) == 1);
	/* A SEND posted just before the wait completes while libsoftnic
	 * watches the CQ, or soon after it took to the channel. */
	for (int i = 0; i < 20; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = 8, .lkey = src->lkey };
		struct ibv_send_wr wr = { .wr_id = 0x5e4d, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		int n = 0;

		MUST(!ibv_req_notify_cq(e.cq, 0));
		post_recvs(NULL, e.qp, dst, 1, &id);
		MUST(!ibv_post_send(qa, &wr, &bad));
		failed += get_cq_event(&e) != 0;
		for (int tries = 0; n == 0 && tries < 10000000; tries++)
			n = ibv_poll_cq(e.cq, 8, wc);
		MUST(n == 1 && wc[0].status == IBV_WC_SUCCESS);
		MUST(wait_wc().status == IBV_WC_SUCCESS);
	}
	CHECK(!failed, "20 SENDs each end a blocking ibv_get_cq_event (%d did not)", failed);
	CHECK(!cq_event(&e, 100), "and raise one event each");
	MUST(!ibv_req_notify_cq(e.cq, 0));
	MUST(!pthread_create(&t, NULL, later_send, src));
	CHECK(get_cq_event(&e) == 0, "a blocking ibv_get_cq_event returns the event of a completion 20 ms later");
	MUST(!pthread_join(t, NULL));
	CHECK(!cq_event(&e, 100), "the later completion's event is raised once");
	MUST(ibv_poll_cq(e.cq, 8, wc) == 1);
	int flags = fcntl(e.ch->fd, F_GETFL);
	MUST(flags >= 0 && !fcntl(e.ch->fd, F_SETFL, flags | O_NONBLOCK));
	MUST(!ibv_req_notify_cq(e.cq, 0));
	errno = 0;
	int rc = get_cq_event(&e);
	CHECK(rc == -1 && errno == EAGAIN, "a non-blocking channel with no event: %d, errno %d; want -1, EAGAIN", rc, errno);
	send_from_qa(src);
	CHECK(cq_event(&e, 2000), "a non-blocking channel raises the event");
	close_event_cq(&e);
}

/* A signal the program catches interrupts its wait in ibv_get_cq_event
 * (-1, EINTR), as with libibverbs, whose programs end a test so (qperf's
 * SIGALRM): it reaches the program's thread, not one of libsoftnic's Go
 * runtime, and the wait is not taken up again. The signal comes 200 ms
 * into the wait, when libsoftnic sleeps on the channel, and 50 us into
 * it, while it watches the channel's CQs first (for 100 us). Should the
 * signal not end the wait, a SEND two seconds later does, and the check
 * fails; an early signal that came before the call proves nothing, and
 * the call is tried again, five times at most. */
static volatile sig_atomic_t alarmed;
static pthread_mutex_t watchdog_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watchdog_cond = PTHREAD_COND_INITIALIZER;
static int watchdog_done;

static struct timespec alarmed_at, called_at;

static void on_alarm(int sig)
{
	(void)sig;
	alarmed = 1;
	clock_gettime(CLOCK_MONOTONIC, &alarmed_at);
}

/* before reports whether a is before b. */
static int before(struct timespec a, struct timespec b)
{
	return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static void *watchdog(void *src)
{
	struct timespec end;
	int done;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += 2;
	pthread_mutex_lock(&watchdog_mu);
	while (!watchdog_done && pthread_cond_timedwait(&watchdog_cond, &watchdog_mu, &end) == 0)
		;
	done = watchdog_done;
	pthread_mutex_unlock(&watchdog_mu);
	if (!done)
		send_from_qa(src);
	return NULL;
}

/* interrupted reports whether SIGALRM, due after us microseconds,
 * interrupts a wait in ibv_get_cq_event that nothing else ends: 1 if it
 * does, 0 if not, -1 if the signal came before the call (the thread was
 * descheduled on the way), which proves nothing. */
static int interrupted(struct event_cq *e, struct ibv_mr *src, long us)
{
	struct itimerval in = { .it_value = { .tv_sec = us / 1000000, .tv_usec = us % 1000000 } };
	sigset_t alrm, mask;
	pthread_t t;

	MUST(!ibv_req_notify_cq(e->cq, 0));
	alarmed = 0;
	watchdog_done = 0;
	/* The watchdog blocks SIGALRM, which is then the waiting thread's. */
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	MUST(!pthread_sigmask(SIG_BLOCK, &alrm, &mask));
	MUST(!pthread_create(&t, NULL, watchdog, src));
	MUST(!pthread_sigmask(SIG_SETMASK, &mask, NULL));
	MUST(!setitimer(ITIMER_REAL, &in, NULL));
	errno = 0;
	clock_gettime(CLOCK_MONOTONIC, &called_at);
	int rc = get_cq_event(e);
	int err = errno;
	pthread_mutex_lock(&watchdog_mu);
	watchdog_done = 1;
	pthread_cond_signal(&watchdog_cond);
	pthread_mutex_unlock(&watchdog_mu);
	MUST(!pthread_join(t, NULL));
	if (rc == 0) {
		struct ibv_wc wc;

		MUST(ibv_poll_cq(e->cq, 1, &wc) == 1);
	}
	if (alarmed && before(alarmed_at, called_at))
		return -1;
	return rc == -1 && err == EINTR && alarmed;
}

static void signal_interrupts_wait(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct event_cq e = open_event_cq(dst, 6);
	struct sigaction sa = { .sa_handler = on_alarm }, old;

	MUST(!sigaction(SIGALRM, &sa, &old));
	CHECK(interrupted(&e, src, 200000) == 1, "SIGALRM interrupts ibv_get_cq_event asleep on the channel");
	int early = -1;
	for (int try = 0; try < 5 && early == -1; try++)
		early = interrupted(&e, src, 50);
	CHECK(early == 1, "SIGALRM interrupts ibv_get_cq_event while it watches the channel's CQs (%s)",
	      early == 1 ? "interrupted" : early == 0 ? "not interrupted" : "the signal came before the call five times");
	MUST(!sigaction(SIGALRM, &old, NULL));
	close_event_cq(&e);
}

/* ibv_destroy_qp takes the QP's completions out of its CQs, as mlx5's
 * provider does: a receive completed and not polled, and the receives
 * the destroy flushes, are not polled after it. */
static void destroy_qp_discards(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_wc wc[8];
	uint64_t id = 0;

	MUST(rcq);
	struct ibv_qp *qr = peer_qp(rcq, NULL);
	post_recvs(NULL, qr, dst, 4, &id);
	send_from_qa(src);
	MUST(!ibv_destroy_qp(qr));
	int n = ibv_poll_cq(rcq, 8, wc);
	CHECK(n == 0, "after ibv_destroy_qp, its CQ gives none of its completions (%d, the first %s)", n,
	      n > 0 ? ibv_wc_status_str(wc[0].status) : "none");
	MUST(!ibv_destroy_cq(rcq));
	connect_qps();
}

/* rdma_migrate_id moves the id's event not yet read (ADDR_RESOLVED) to
 * the new channel, whose descriptor polls readable, the old one not; a
 * synchronous id moved to a channel has its next event there
 * (ROUTE_RESOLVED), and moved back to none, none. */
static struct rdma_event_channel *migrate_to;
static int migrate_returned;

static void *migrate_in_thread(void *id)
{
	MUST(!rdma_migrate_id(id, migrate_to));
	__atomic_store_n(&migrate_returned, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void migrate_id(void)
{
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id;
	pthread_t t;

	MUST(a && b && !rdma_create_id(a, &id, NULL, RDMA_PS_TCP));
	MUST(!rdma_getaddrinfo(cm_ip, cm_port, &hints, &res));
	MUST(!rdma_resolve_addr(id, NULL, res->ai_dst_addr, 1000));
	rdma_freeaddrinfo(res);
	struct pollfd pa = { .fd = a->fd, .events = POLLIN }, pb = { .fd = b->fd, .events = POLLIN };
	CHECK(poll(&pa, 1, 1000) == 1, "ADDR_RESOLVED waits on the id's channel");
	MUST(!rdma_migrate_id(id, b));
	CHECK(id->channel == b && poll(&pa, 1, 0) == 0 && poll(&pb, 1, 0) == 1,
	      "rdma_migrate_id: the event waits on the new channel, not on the old");
	CHECK(!rdma_get_cm_event(b, &ev) && ev->id == id && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "rdma_migrate_id: the new channel gives the id's ADDR_RESOLVED (%s)", ev ? rdma_event_str(ev->event) : "none");
	if (ev) {
		migrate_to = a;
		MUST(!pthread_create(&t, NULL, migrate_in_thread, id));
		usleep(100000);
		CHECK(!__atomic_load_n(&migrate_returned, __ATOMIC_SEQ_CST),
		      "rdma_migrate_id in another thread waits while an event of the id is read and not acknowledged");
		rdma_ack_cm_event(ev);
		MUST(!pthread_join(t, NULL));
		CHECK(migrate_returned && id->channel == a, "rdma_migrate_id returns once the event is acknowledged");
	}
	rdma_destroy_id(id);

	MUST(!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP));
	MUST(!rdma_getaddrinfo(cm_ip, cm_port, &hints, &res));
	MUST(!rdma_resolve_addr(id, NULL, res->ai_dst_addr, 1000));
	rdma_freeaddrinfo(res);
	MUST(!rdma_migrate_id(id, b));
	MUST(!rdma_resolve_route(id, 1000));
	ev = NULL;
	CHECK(!rdma_get_cm_event(b, &ev) && ev->id == id && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "rdma_migrate_id: a synchronous id moved to a channel has ROUTE_RESOLVED there (%s)",
	      ev ? rdma_event_str(ev->event) : "none");
	if (ev)
		rdma_ack_cm_event(ev);
	MUST(!rdma_migrate_id(id, NULL));
	CHECK(id->channel == NULL && !rdma_resolve_route(id, 1000) && poll(&pb, 1, 100) == 0,
	      "rdma_migrate_id: moved back to synchronous, rdma_resolve_route completes with no event");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
}

/* rereg_is checks what an ibv_rereg_mr refused answers: libibverbs' code
 * and errno, and a region left as it was. */
static void rereg_is(struct ibv_mr *mr, int flags, struct ibv_pd *to, void *addr, size_t len, int access, int code,
		     int err, const char *what)
{
	struct ibv_pd *was = mr->pd;
	uint32_t rkey = mr->rkey;

	errno = 0;
	int ret = ibv_rereg_mr(mr, flags, to, addr, len, access);

	CHECK(ret == code && errno == err && mr->pd == was && mr->rkey == rkey,
	      "ibv_rereg_mr %s: %d with errno %d (want %d, %d)", what, ret, errno, code, err);
}

/* ibv_rereg_mr as rxe does it: a new PD and/or new access flags in place,
 * the keys kept, each change seen by the next remote operation; libibverbs'
 * own checks IBV_REREG_MR_ERR_INPUT, the device's IBV_REREG_MR_ERR_CMD,
 * errno EINVAL either way, and a new address range EOPNOTSUPP. */
static void rereg_mr(struct ibv_mr *src)
{
	struct ibv_async_event ev;
	char *tbuf = aligned_alloc(4096, 4096);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);

	MUST(tbuf && pd2);
	memset(tbuf, 0, 4096);
	struct ibv_mr *t = ibv_reg_mr(pd, tbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	MUST(t);
	uint32_t rkey = t->rkey;
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *q2 = ibv_create_qp(pd2, &a);
	MUST(q2);

	connect_qps();
	strcpy(src->addr, "rereg 1");
	struct ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 8, src->lkey, (uintptr_t)tbuf, rkey);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "ibv_rereg_mr: a WRITE before REMOTE_WRITE is given is refused (%s)",
	      ibv_wc_status_str(wc.status));
	connect_qps();
	CHECK(!ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) &&
		      t->rkey == rkey && t->lkey == rkey && t->pd == pd,
	      "ibv_rereg_mr IBV_REREG_MR_CHANGE_ACCESS gives REMOTE_WRITE and keeps the keys");
	wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 8, src->lkey, (uintptr_t)tbuf, rkey);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(tbuf, "rereg 1"), "ibv_rereg_mr: the WRITE with the same rkey lands (%s)",
	      ibv_wc_status_str(wc.status));
	CHECK(!ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE),
	      "ibv_rereg_mr takes REMOTE_WRITE away");
	strcpy(src->addr, "rereg 2");
	wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 8, src->lkey, (uintptr_t)tbuf, rkey);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && !strcmp(tbuf, "rereg 1"), "ibv_rereg_mr: the WRITE is refused again (%s)",
	      ibv_wc_status_str(wc.status));
	connect_qps();

	CHECK(!ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) && t->pd == pd2 && t->rkey == rkey,
	      "ibv_rereg_mr IBV_REREG_MR_CHANGE_PD moves the region to a second PD (mr->pd follows)");
	wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 8, src->lkey, (uintptr_t)tbuf, rkey);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && !strcmp(tbuf, "rereg 1"),
	      "ibv_rereg_mr: a QP of the old PD may no longer WRITE it (%s)", ibv_wc_status_str(wc.status));
	connect_qp(qa, q2->qp_num, &gid);
	connect_qp(q2, qa->qp_num, &gid);
	wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 8, src->lkey, (uintptr_t)tbuf, rkey);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(tbuf, "rereg 2"), "ibv_rereg_mr: a QP of the new PD WRITEs it (%s)",
	      ibv_wc_status_str(wc.status));

	rereg_is(t, 1 << 3, NULL, NULL, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL, "with an unknown flag");
	rereg_is(t, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE, IBV_REREG_MR_ERR_INPUT, EINVAL,
		 "with access but no IBV_REREG_MR_CHANGE_ACCESS");
	rereg_is(t, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL,
		 "IBV_REREG_MR_CHANGE_TRANSLATION without an address");
	rereg_is(t, 0, NULL, NULL, 0, 0, IBV_REREG_MR_ERR_CMD, EINVAL, "without flags");
	rereg_is(t, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE, IBV_REREG_MR_ERR_CMD, EINVAL,
		 "to REMOTE_WRITE without LOCAL_WRITE");
	rereg_is(t, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, tbuf, 4096, 0, IBV_REREG_MR_ERR_CMD, EOPNOTSUPP,
		 "IBV_REREG_MR_CHANGE_TRANSLATION (refused as rxe refuses it)");

	MUST(!ibv_destroy_qp(q2));
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "ibv_dealloc_pd of the region's new PD is EBUSY");
	CHECK(!ibv_rereg_mr(t, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) && t->pd == pd && !ibv_dealloc_pd(pd2),
	      "ibv_rereg_mr moves the region back, and the PD it left can be deallocated");
	MUST(!ibv_dereg_mr(t));
	free(tbuf);
	connect_qps();
	while (next_async_event(&ev, 100))
		;
}

/* rdma_getaddrinfo takes the hints' addresses as given when neither node
 * nor service names one, and the hints' source beside a resolved
 * destination, as librdmacm does; rdma_bind_addr then takes that source
 * (libfabric's verbs provider names its endpoints so). */
static void getaddrinfo_hints(void)
{
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(7) }, dst = src;
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	struct rdma_cm_id *id;

	MUST(inet_pton(AF_INET, cm_ip, &src.sin_addr) == 1);
	dst.sin_port = htons(9);
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	CHECK(!rdma_getaddrinfo(NULL, NULL, &hints, &res) && res->ai_src_addr && res->ai_src_len == sizeof(src) &&
		      !memcmp(res->ai_src_addr, &src, sizeof(src)) && !res->ai_dst_addr && res->ai_family == AF_INET,
	      "rdma_getaddrinfo(NULL, NULL) with a passive hint's source address returns that address");
	MUST(!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP));
	CHECK(!rdma_bind_addr(id, res->ai_src_addr) && rdma_get_src_port(id) == htons(7),
	      "rdma_bind_addr binds the address rdma_getaddrinfo returned");
	rdma_destroy_id(id);
	rdma_freeaddrinfo(res);

	hints.ai_flags = 0;
	hints.ai_dst_addr = (struct sockaddr *)&dst;
	hints.ai_dst_len = sizeof(dst);
	CHECK(!rdma_getaddrinfo(NULL, NULL, &hints, &res) && res->ai_dst_addr && !memcmp(res->ai_dst_addr, &dst, sizeof(dst)) &&
		      res->ai_src_addr && !memcmp(res->ai_src_addr, &src, sizeof(src)),
	      "rdma_getaddrinfo(NULL, NULL) with a hint's destination and source returns both");
	rdma_freeaddrinfo(res);

	hints.ai_dst_addr = NULL;
	hints.ai_dst_len = 0;
	CHECK(!rdma_getaddrinfo(cm_ip, "9", &hints, &res) && res->ai_dst_addr &&
		      ((struct sockaddr_in *)res->ai_dst_addr)->sin_port == htons(9) && res->ai_src_addr &&
		      !memcmp(res->ai_src_addr, &src, sizeof(src)),
	      "rdma_getaddrinfo resolving a destination keeps the hint's source");
	rdma_freeaddrinfo(res);
}

/* An id bound to port 0 gets a free port, each its own, which
 * rdma_get_src_port says, as Linux does: asked before rdma_listen (as
 * qperf's server does, to tell its client), the port it then listens on. */
/* refused_before_listen connects to port of addr, which an id holds,
 * bound and not listening yet: the request is rejected as Linux rejects
 * it, as for a port nobody listens on (REJ "invalid service ID", 8). */
static void refused_before_listen(struct sockaddr_in *addr, __be16 port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct sockaddr_in to = *addr;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *client;

	to.sin_port = port;
	MUST(ch && !rdma_create_id(NULL, &client, NULL, RDMA_PS_TCP));
	MUST(!rdma_resolve_addr(client, NULL, (struct sockaddr *)&to, 1000) && !rdma_resolve_route(client, 1000));
	MUST(!rdma_create_qp(client, NULL, &attr) && !rdma_migrate_id(client, ch));
	MUST(!rdma_connect(client, NULL));
	MUST(!rdma_get_cm_event(ch, &ev));
	CHECK(ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8,
	      "rdma_connect to a port bound and not listened on yet is rejected, invalid service ID (%s, status %d)",
	      rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(client);
	rdma_destroy_id(client);
	rdma_destroy_event_channel(ch);
}

static void listen_any_port(void)
{
	struct sockaddr_in any = { .sin_family = AF_INET };
	struct rdma_cm_id *id[2];
	__be16 before;
	int i;

	MUST(inet_pton(AF_INET, cm_ip, &any.sin_addr) == 1);
	for (i = 0; i < 2; i++) {
		MUST(!rdma_create_id(NULL, &id[i], NULL, RDMA_PS_TCP));
		MUST(!rdma_bind_addr(id[i], (struct sockaddr *)&any));
	}
	before = rdma_get_src_port(id[0]);
	refused_before_listen(&any, before);
	for (i = 0; i < 2; i++)
		MUST(!rdma_listen(id[i], 1));
	CHECK(rdma_get_src_port(id[0]) && rdma_get_src_port(id[1]) && rdma_get_src_port(id[0]) != rdma_get_src_port(id[1]),
	      "two ids bound to port 0 listen on two ports of their own (%d, %d)", ntohs(rdma_get_src_port(id[0])),
	      ntohs(rdma_get_src_port(id[1])));
	CHECK(before && before == rdma_get_src_port(id[0]),
	      "rdma_get_src_port between rdma_bind_addr and rdma_listen gives the port listened on (%d, then %d)",
	      ntohs(before), ntohs(rdma_get_src_port(id[0])));
	for (i = 0; i < 2; i++)
		rdma_destroy_id(id[i]);
}

/* rdma_destroy_id, as librdmacm's: the id's events still queued go with
 * it, and it waits until the program has acknowledged those it read, so
 * that a thread handling an event never has its id freed under it by
 * another thread; a listener's connection requests not yet read go with
 * it, rejected. */
static int destroy_returned, connect_ended, connect_errno;

static void *destroy_in_thread(void *id)
{
	rdma_destroy_id(id);
	__atomic_store_n(&destroy_returned, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *connect_in_thread(void *id)
{
	errno = 0;
	connect_errno = rdma_connect(id, NULL) ? errno : 0;
	__atomic_store_n(&connect_ended, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void destroy_id_events(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct sockaddr_in any = { .sin_family = AF_INET }, to;
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id, *listener, *client;
	struct pollfd p;
	pthread_t t;
	int i;

	MUST(ch && !rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	MUST(!rdma_getaddrinfo(cm_ip, cm_port, &hints, &res));
	MUST(!rdma_resolve_addr(id, NULL, res->ai_dst_addr, 1000));
	MUST(poll(&p, 1, 1000) == 1);
	rdma_destroy_id(id);
	CHECK(poll(&p, 1, 100) == 0, "rdma_destroy_id: the id's event not yet read goes with it");

	MUST(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	MUST(!rdma_resolve_addr(id, NULL, res->ai_dst_addr, 1000));
	rdma_freeaddrinfo(res);
	MUST(!rdma_get_cm_event(ch, &ev) && ev->id == id);
	MUST(!pthread_create(&t, NULL, destroy_in_thread, id));
	usleep(100000);
	CHECK(!__atomic_load_n(&destroy_returned, __ATOMIC_SEQ_CST) && ev->id->channel == ch,
	      "rdma_destroy_id in another thread waits while an event of the id is read and not acknowledged");
	rdma_ack_cm_event(ev);
	MUST(!pthread_join(t, NULL));
	CHECK(destroy_returned, "rdma_destroy_id returns once the event is acknowledged");

	MUST(inet_pton(AF_INET, cm_ip, &any.sin_addr) == 1);
	MUST(!rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP));
	MUST(!rdma_bind_addr(listener, (struct sockaddr *)&any) && !rdma_listen(listener, 4));
	to = any;
	to.sin_port = rdma_get_src_port(listener);
	MUST(!rdma_create_id(NULL, &client, NULL, RDMA_PS_TCP));
	MUST(!rdma_resolve_addr(client, NULL, (struct sockaddr *)&to, 1000) && !rdma_resolve_route(client, 1000));
	MUST(!rdma_create_qp(client, NULL, &attr));
	MUST(!pthread_create(&t, NULL, connect_in_thread, client));
	CHECK(poll(&p, 1, 2000) == 1, "destroy_id: a CONNECT_REQUEST waits on the listener's channel");
	rdma_destroy_id(listener);
	for (i = 0; i < 500 && !__atomic_load_n(&connect_ended, __ATOMIC_SEQ_CST); i++)
		usleep(10000);
	CHECK(poll(&p, 1, 0) == 0 && connect_ended && connect_errno == ECONNREFUSED,
	      "rdma_destroy_id of a listener rejects its connection request not yet read (rdma_connect: %s)",
	      connect_ended ? strerror(connect_errno) : "still waiting after 5 s");
	if (connect_ended) {
		pthread_join(t, NULL);
		rdma_destroy_qp(client);
		rdma_destroy_id(client);
	}
	rdma_destroy_event_channel(ch);
}

/* ibv_query_device_ex answers, rather than falling back to
 * ibv_query_device (which would leave the extended part 0): the basic
 * attributes, the capabilities in 64 bits and the port count. */
static void query_device_ex(void)
{
	struct ibv_device_attr dev;
	struct ibv_device_attr_ex ax;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };

	memset(&ax, 0xff, sizeof(ax));
	MUST(!ibv_query_device(ctx, &dev));
	CHECK(!ibv_query_device_ex(ctx, NULL, &ax) && ax.orig_attr.max_qp == dev.max_qp &&
		      ax.orig_attr.node_guid == dev.node_guid && ax.device_cap_flags_ex == dev.device_cap_flags &&
		      ax.phys_port_cnt_ex == 1 && ax.completion_timestamp_mask == 0 &&
		      ax.odp_caps.general_caps == IBV_ODP_SUPPORT &&
		      ax.odp_caps.per_transport_caps.rc_odp_caps ==
			      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			       IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV) &&
		      ax.odp_caps.per_transport_caps.uc_odp_caps == 0 &&
		      ax.odp_caps.per_transport_caps.ud_odp_caps ==
			      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV),
	      "ibv_query_device_ex (cap flags %#llx, ports %u)", (unsigned long long)ax.device_cap_flags_ex,
	      ax.phys_port_cnt_ex);
	CHECK(ibv_query_device_ex(ctx, &in, &ax) == EINVAL, "ibv_query_device_ex with an input comp_mask is EINVAL");
}

/* on_demand_paging: a region registered with IBV_ACCESS_ON_DEMAND takes a
 * peer's WRITE, and ibv_advise_mr prefetches its pages, with rxe's errnos
 * for what it refuses. */
static void on_demand_paging(struct ibv_mr *src)
{
	char *buf = aligned_alloc(4096, 3 * 4096), *plain = aligned_alloc(4096, 4096);
	struct ibv_mr *odp = ibv_reg_mr(pd, buf, 3 * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND);
	struct ibv_mr *ro = ibv_reg_mr(pd, plain, 4096, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND);

	MUST(buf && plain && odp && ro);
	strcpy(src->addr, "paged in");
	struct ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 9, src->lkey, (uintptr_t)buf + 4096, odp->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(buf + 4096, "paged in"), "a WRITE into an ON_DEMAND region (%s)",
	      ibv_wc_status_str(wc.status));

	struct ibv_sge in = { .addr = (uintptr_t)buf + 100, .length = 2 * 4096, .lkey = odp->lkey };
	struct ibv_sge past = { .addr = (uintptr_t)buf + 4096, .length = 3 * 4096, .lkey = odp->lkey };
	struct ibv_sge pinned = { .addr = (uintptr_t)src->addr, .length = 64, .lkey = src->lkey };
	struct ibv_sge unknown = { .addr = (uintptr_t)buf, .length = 64, .lkey = odp->lkey ^ 0x5a5a00 };
	struct ibv_sge readonly = { .addr = (uintptr_t)plain, .length = 64, .lkey = ro->lkey };
	struct ibv_sge two[2] = { in, past };
	struct {
		const char *what;
		int advice;
		uint32_t flags;
		struct ibv_sge *sge;
		uint32_t n;
		int want;
	} cases[] = {
		{ "PREFETCH_WRITE, flushed", IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &in, 1, 0 },
		{ "PREFETCH", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &in, 1, 0 },
		{ "PREFETCH_NO_FAULT", IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &in, 1, 0 },
		{ "an advice that is no prefetch", 17, 0, &in, 1, EOPNOTSUPP },
		{ "an unknown flag", IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 7, &in, 1, EINVAL },
		{ "no SGE", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &in, 0, EINVAL },
		{ "a range past the region", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &past, 1, EINVAL },
		{ "a second SGE past the region", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, two, 2, EINVAL },
		{ "a region without ON_DEMAND", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1, EINVAL },
		{ "an lkey of no region", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &unknown, 1, EINVAL },
		{ "a region without LOCAL_WRITE", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &readonly, 1, EINVAL },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int err = ibv_advise_mr(pd, cases[i].advice, cases[i].flags, cases[i].sge, cases[i].n);

		CHECK(err == cases[i].want, "ibv_advise_mr, %s: %d, want %d", cases[i].what, err, cases[i].want);
	}
	MUST(!ibv_dereg_mr(odp) && !ibv_dereg_mr(ro));
	free(buf);
	free(plain);
}

/* send_imm_from_qa sends len bytes of src with immediate data imm from qa
 * and waits for the SEND's completion. */
static void send_imm_from_qa(struct ibv_mr *src, uint32_t len, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = len, .lkey = src->lkey };
	struct ibv_send_wr wr = { .wr_id = 0x1a, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm) };

	post_and_wait(qa, &wr);
}

/* An extended CQ (ibv_create_cq_ex, as rxe's): the fields rxe offers,
 * polled with start_poll, next_poll and end_poll; timestamps refused;
 * and the same CQ through ibv_poll_cq and a completion channel. */
static void cq_ex(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_cq_init_attr_ex ts = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	struct ibv_cq_init_attr_ex overrun = { .cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					       .flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN };
	struct ibv_cq_init_attr_ex narrow = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq_init_attr_ex a = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS, .channel = ch,
					 .cq_context = &a, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					 .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED };
	struct ibv_cq_ex *cqx;
	struct ibv_qp *peer;
	uint64_t id = 0;

	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ts) && errno == EOPNOTSUPP,
	      "ibv_create_cq_ex refuses completion timestamps with EOPNOTSUPP, as rxe");
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &overrun) && errno == EOPNOTSUPP,
	      "ibv_create_cq_ex refuses IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN with EOPNOTSUPP, as rxe");
	cqx = ibv_create_cq_ex(ctx, &narrow);
	CHECK(cqx && cqx->read_byte_len && !cqx->read_imm_data && !cqx->read_qp_num && cqx->read_opcode &&
		      !ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)),
	      "ibv_create_cq_ex gives the read_ ops of the fields wc_flags asks for, and ibv_destroy_cq destroys it");

	MUST(ch);
	cqx = ibv_create_cq_ex(ctx, &a);
	CHECK(cqx && ibv_cq_ex_to_cq(cqx)->cqe >= 16 && cqx->cq_context == &a && cqx->channel == ch,
	      "ibv_create_cq_ex with IBV_WC_STANDARD_FLAGS and a completion channel");
	MUST(cqx);
	peer = peer_qp(ibv_cq_ex_to_cq(cqx), NULL);
	post_recvs(NULL, peer, dst, 3, &id);
	CHECK(ibv_start_poll(cqx, &(struct ibv_poll_cq_attr){ 0 }) == ENOENT, "ibv_start_poll of an empty CQ is ENOENT");
	send_imm_from_qa(src, 5, 0xabcd);
	send_imm_from_qa(src, 7, 0x1234);

	int first = ibv_start_poll(cqx, &(struct ibv_poll_cq_attr){ 0 });
	CHECK(!first && cqx->wr_id == 0 && cqx->status == IBV_WC_SUCCESS && ibv_wc_read_opcode(cqx) == IBV_WC_RECV &&
		      ibv_wc_read_byte_len(cqx) == 5 && ibv_wc_read_imm_data(cqx) == htonl(0xabcd) &&
		      (ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM) && ibv_wc_read_qp_num(cqx) == peer->qp_num && cqx->read_src_qp &&
		      ibv_wc_read_vendor_err(cqx) == 0 && ibv_wc_read_slid(cqx) == 0 && ibv_wc_read_sl(cqx) == 0 &&
		      ibv_wc_read_dlid_path_bits(cqx) == 0,
	      "ibv_start_poll takes the first RECV_WITH_IMM, each field read (wr_id %llu, opcode %d, byte_len %u)",
	      (unsigned long long)cqx->wr_id, first ? -1 : (int)ibv_wc_read_opcode(cqx), first ? 0 : ibv_wc_read_byte_len(cqx));
	if (!first) {
		int next = ibv_next_poll(cqx);
		CHECK(!next && cqx->wr_id == 1 && ibv_wc_read_byte_len(cqx) == 7 && ibv_wc_read_imm_data(cqx) == htonl(0x1234),
		      "ibv_next_poll takes the second (wr_id %llu)", (unsigned long long)cqx->wr_id);
		CHECK(ibv_next_poll(cqx) == ENOENT, "ibv_next_poll past the last is ENOENT");
		ibv_end_poll(cqx);
	}

	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct ibv_cq *evcq = NULL;
	void *evctx = NULL;
	struct ibv_wc wc = { 0 };

	MUST(!ibv_req_notify_cq(ibv_cq_ex_to_cq(cqx), 0));
	send_imm_from_qa(src, 3, 9);
	CHECK(poll(&p, 1, 10000) == 1 && !ibv_get_cq_event(ch, &evcq, &evctx) && evcq == ibv_cq_ex_to_cq(cqx) &&
		      evctx == &a,
	      "the extended CQ's completion event comes through its channel");
	if (evcq)
		ibv_ack_cq_events(evcq, 1);
	CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(cqx), 1, &wc) == 1 && wc.wr_id == 2 && wc.byte_len == 3 &&
		      (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(9),
	      "ibv_poll_cq polls the extended CQ (wr_id %llu)", (unsigned long long)wc.wr_id);
	MUST(!ibv_destroy_qp(peer));
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) && !ibv_destroy_comp_channel(ch),
	      "ibv_destroy_cq destroys the extended CQ, and then its channel can go");
	connect_qps();
}

/* wait_wr_id polls cq until the completion of wr_id, which must be a
 * success, skipping others. */
static struct ibv_wc wait_wr_id(uint64_t wr_id)
{
	for (;;) {
		struct ibv_wc wc = wait_wc();

		if (wc.wr_id == wr_id)
			return wc;
	}
}

/* An extended QP (ibv_create_qp_ex with send_ops_flags, as rxe's): WRITE,
 * READ, FETCH_ADD and SEND_WITH_IMM of inline data built with the
 * ibv_wr_* API, a chain of two work requests posted by one wr_complete,
 * wr_abort posting nothing, too many SGEs failing wr_complete, and send
 * operations the QP type lacks refused. */
static void qp_ex(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				  IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	struct ibv_qp_init_attr_ex bad = a;
	char *tbuf = calloc(1, 4096), *sbuf = src->addr;
	struct ibv_mr *t = ibv_reg_mr(pd, tbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_qp *qx;
	struct ibv_qp_ex *x;
	struct ibv_wc wc;
	uint64_t id = 0;
	int err;

	MUST(t);
	bad.send_ops_flags |= IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &bad) && errno == EOPNOTSUPP, "ibv_create_qp_ex refuses IBV_QP_EX_WITH_TSO with EOPNOTSUPP");
	bad = a;
	bad.qp_type = IBV_QPT_UD;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &bad) && errno == EOPNOTSUPP, "ibv_create_qp_ex refuses RDMA_WRITE on a UD QP with EOPNOTSUPP");
	CHECK(!ibv_qp_to_qp_ex(qa), "ibv_qp_to_qp_ex of a QP ibv_create_qp made is NULL");
	qx = ibv_create_qp_ex(ctx, &a);
	x = qx ? ibv_qp_to_qp_ex(qx) : NULL;
	CHECK(x && x->wr_rdma_write && x->wr_send_imm && !x->wr_send && !x->wr_atomic_cmp_swp,
	      "ibv_create_qp_ex with send_ops_flags: ibv_qp_to_qp_ex gives the builders asked for");
	MUST(x);
	connect_qp(qx, qb->qp_num, &gid);
	connect_qp(qb, qx->qp_num, &gid);

	strcpy(sbuf, "written by ibv_wr");
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, t->rkey, (uintptr_t)tbuf);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)sbuf, 18);
	err = ibv_wr_complete(x);
	wc = wait_wr_id(1);
	CHECK(!err && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && !strcmp(tbuf, "written by ibv_wr"),
	      "ibv_wr_rdma_write (%s)", ibv_wc_status_str(wc.status));

	strcpy(tbuf + 100, "read by ibv_wr");
	ibv_wr_start(x);
	x->wr_id = 2;
	ibv_wr_rdma_read(x, t->rkey, (uintptr_t)tbuf + 100);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)sbuf + 100, 15);
	err = ibv_wr_complete(x);
	wc = wait_wr_id(2);
	CHECK(!err && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && !strcmp(sbuf + 100, "read by ibv_wr"),
	      "ibv_wr_rdma_read (%s)", ibv_wc_status_str(wc.status));

	uint64_t *counter = (uint64_t *)(tbuf + 512), *old = (uint64_t *)(sbuf + 512);
	*counter = 40;
	*old = 0;
	ibv_wr_start(x);
	x->wr_id = 3;
	ibv_wr_atomic_fetch_add(x, t->rkey, (uintptr_t)counter, 2);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)old, 8);
	err = ibv_wr_complete(x);
	wc = wait_wr_id(3);
	CHECK(!err && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD && *old == 40 && *counter == 42,
	      "ibv_wr_atomic_fetch_add (%s, old %llu, new %llu)", ibv_wc_status_str(wc.status), (unsigned long long)*old,
	      (unsigned long long)*counter);

	char msg[16] = "inline";
	int got = 0;

	post_recvs(NULL, qb, dst, 1, &id);
	ibv_wr_start(x);
	x->wr_id = 4;
	ibv_wr_send_imm(x, htonl(0x4242));
	ibv_wr_set_inline_data(x, msg, 7);
	memset(msg, 'x', sizeof(msg)); /* the data was copied */
	err = ibv_wr_complete(x);
	for (int n = 0; n < 2; n++) {
		wc = wait_wc();
		if (wc.wr_id == 4 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND)
			got |= 1;
		if (wc.wr_id == 0 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 7 &&
		    (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0x4242) && !strcmp(dst->addr, "inline"))
			got |= 2;
	}
	CHECK(!err && got == 3, "ibv_wr_send_imm of inline data, copied at ibv_wr_set_inline_data (%d)", got);

	struct ibv_sge two[2] = {
		{ .addr = (uintptr_t)sbuf + 1000, .length = 5, .lkey = src->lkey },
		{ .addr = (uintptr_t)sbuf + 2000, .length = 6, .lkey = src->lkey },
	};
	strcpy(sbuf + 1000, "chain");
	strcpy(sbuf + 2000, "ed two");
	strcpy(tbuf + 3000, "remote");
	ibv_wr_start(x);
	x->wr_id = 5;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, t->rkey, (uintptr_t)tbuf + 1000);
	ibv_wr_set_sge_list(x, 2, two);
	x->wr_id = 6;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, t->rkey, (uintptr_t)tbuf + 3000);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)sbuf + 3000, 7);
	err = ibv_wr_complete(x);
	wc = wait_wc();
	CHECK(!err && wc.wr_id == 6 && wc.status == IBV_WC_SUCCESS && !strcmp(tbuf + 1000, "chained two") &&
		      !strcmp(sbuf + 3000, "remote"),
	      "one ibv_wr_complete posts a chain of two: an unsignaled WRITE of two SGEs, then a READ (wr_id %llu)",
	      (unsigned long long)wc.wr_id);

	strcpy(sbuf, "aborted");
	ibv_wr_start(x);
	x->wr_id = 7;
	ibv_wr_rdma_write(x, t->rkey, (uintptr_t)tbuf);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)sbuf, 8);
	ibv_wr_abort(x);
	usleep(200000);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0 && !strcmp(tbuf, "written by ibv_wr"), "ibv_wr_abort posts nothing");

	struct ibv_sge three[3] = { two[0], two[1], two[1] };
	ibv_wr_start(x);
	x->wr_id = 8;
	ibv_wr_rdma_write(x, t->rkey, (uintptr_t)tbuf);
	ibv_wr_set_sge_list(x, 3, three);
	err = ibv_wr_complete(x);
	usleep(200000);
	CHECK(err == ENOSPC && ibv_poll_cq(cq, 1, &wc) == 0,
	      "ibv_wr_complete of more SGEs than max_send_sge is ENOSPC, as rxe, and posts nothing (got %d)", err);

	MUST(!ibv_destroy_qp(qx));
	MUST(!ibv_dereg_mr(t));
	free(tbuf);
	connect_qps();
}

/* wait_wcs polls cq for n completions into wc. */
static void wait_wcs(struct ibv_wc *wc, int n)
{
	for (int i = 0; i < n; i++)
		wc[i] = wait_wc();
}

/* find_wc is the completion of wr_id among wc[0..n), or NULL. */
static struct ibv_wc *find_wc(struct ibv_wc *wc, int n, uint64_t wr_id)
{
	for (int i = 0; i < n; i++)
		if (wc[i].wr_id == wr_id)
			return &wc[i];
	return NULL;
}

/* The other builders of an RC extended QP with every send operation rxe
 * offers: CMP_AND_SWP, WRITE_WITH_IMM, a SEND of an inline data list, a
 * type 2 window bound with BIND_MW and invalidated with LOCAL_INV, and
 * SEND_WITH_INV invalidating the receiver's window. */
static void qp_ex_ops(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 32 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
				  IBV_QP_EX_WITH_SEND_WITH_INV,
	};
	char *tbuf = calloc(1, 4096), *sbuf = src->addr;
	struct ibv_mr *t = ibv_reg_mr(pd, tbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2), *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	struct ibv_qp *qx = ibv_create_qp_ex(ctx, &a);
	struct ibv_qp_ex *x = qx ? ibv_qp_to_qp_ex(qx) : NULL;
	struct ibv_wc wc[2], *w, *r;
	uint64_t id = 0;
	int err;

	MUST(t && mw && mw2);
	CHECK(x && x->wr_rdma_write && x->wr_rdma_write_imm && x->wr_send && x->wr_send_imm && x->wr_rdma_read &&
		      x->wr_atomic_cmp_swp && x->wr_atomic_fetch_add && x->wr_local_inv && x->wr_bind_mw && x->wr_send_inv &&
		      !x->wr_atomic_write && !x->wr_send_tso,
	      "ibv_create_qp_ex with every send operation rxe offers on RC but ATOMIC_WRITE and FLUSH");
	MUST(x);
	connect_qp(qx, qb->qp_num, &gid);
	connect_qp(qb, qx->qp_num, &gid);
	x->wr_flags = IBV_SEND_SIGNALED;

	uint64_t *word = (uint64_t *)(tbuf + 8), *old = (uint64_t *)(sbuf + 8);
	*word = 5;
	ibv_wr_start(x);
	x->wr_id = 10;
	ibv_wr_atomic_cmp_swp(x, t->rkey, (uintptr_t)word, 5, 9);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)old, 8);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 1);
	CHECK(!err && wc[0].wr_id == 10 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_COMP_SWAP &&
		      *old == 5 && *word == 9,
	      "ibv_wr_atomic_cmp_swp (old %llu, new %llu)", (unsigned long long)*old, (unsigned long long)*word);

	post_recvs(NULL, qb, dst, 1, &id);
	strcpy(sbuf + 64, "with imm");
	ibv_wr_start(x);
	x->wr_id = 11;
	ibv_wr_rdma_write_imm(x, t->rkey, (uintptr_t)tbuf + 64, htonl(0x77));
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)sbuf + 64, 9);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 2);
	w = find_wc(wc, 2, 11);
	r = find_wc(wc, 2, id - 1);
	CHECK(!err && w && w->status == IBV_WC_SUCCESS && r && r->opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
		      r->imm_data == htonl(0x77) && !strcmp(tbuf + 64, "with imm"),
	      "ibv_wr_rdma_write_imm");

	struct ibv_data_buf parts[2] = { { .addr = "in", .length = 2 }, { .addr = "line list", .length = 10 } };
	post_recvs(NULL, qb, dst, 1, &id);
	ibv_wr_start(x);
	x->wr_id = 12;
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 2, parts);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 2);
	r = find_wc(wc, 2, id - 1);
	CHECK(!err && find_wc(wc, 2, 12) && r && r->status == IBV_WC_SUCCESS && r->byte_len == 12 &&
		      !strcmp((char *)dst->addr + (id - 1) % 64 * 64, "inline list"),
	      "ibv_wr_set_inline_data_list");

	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info info = { .mr = t, .addr = (uintptr_t)tbuf, .length = 256,
					 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	ibv_wr_start(x);
	x->wr_id = 13;
	ibv_wr_bind_mw(x, mw, key, &info);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 1);
	CHECK(!err && wc[0].wr_id == 13 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_BIND_MW,
	      "ibv_wr_bind_mw binds a type 2 window (%s)", ibv_wc_status_str(wc[0].status));
	strcpy(sbuf + 128, "through the window");
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf + 128, .length = 19, .lkey = src->lkey };
	struct ibv_send_wr wr = { .wr_id = 14, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)tbuf + 128;
	wr.wr.rdma.rkey = key;
	post_and_wait(qb, &wr);
	CHECK(!strcmp(tbuf + 128, "through the window"), "a peer WRITEs through the window ibv_wr_bind_mw bound");
	ibv_wr_start(x);
	x->wr_id = 15;
	ibv_wr_local_inv(x, key);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 1);
	CHECK(!err && wc[0].wr_id == 15 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_LOCAL_INV,
	      "ibv_wr_local_inv invalidates it (%s)", ibv_wc_status_str(wc[0].status));

	/* A window bound at the receiver, qb, which the SEND invalidates. */
	key = ibv_inc_rkey(mw2->rkey);
	struct ibv_send_wr bind = { .wr_id = 16, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED };
	bind.bind_mw.mw = mw2;
	bind.bind_mw.rkey = key;
	bind.bind_mw.bind_info = info;
	post_and_wait(qb, &bind);
	post_recvs(NULL, qb, dst, 1, &id);
	ibv_wr_start(x);
	x->wr_id = 17;
	ibv_wr_send_inv(x, key);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)sbuf, 4);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 2);
	w = find_wc(wc, 2, 17);
	r = find_wc(wc, 2, id - 1);
	CHECK(!err && w && w->status == IBV_WC_SUCCESS && r && r->status == IBV_WC_SUCCESS &&
		      (r->wc_flags & IBV_WC_WITH_INV) && r->invalidated_rkey == key,
	      "ibv_wr_send_inv: the receiver's completion names the window's key it invalidated");

	MUST(!ibv_destroy_qp(qx));
	MUST(!ibv_dealloc_mw(mw) && !ibv_dealloc_mw(mw2));
	MUST(!ibv_dereg_mr(t));
	free(tbuf);
	connect_qps();
}

/* ud_qp makes a UD QP on cq, in RTS with Q_Key 0x11, from attr if set. */
static struct ibv_qp *ud_qp(struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd, .comp_mask = IBV_QP_INIT_ATTR_PD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11 };
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, attr ? attr : &a);

	MUST(qp);
	MUST(!ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
	m.qp_state = IBV_QPS_RTR;
	MUST(!ibv_modify_qp(qp, &m, IBV_QP_STATE));
	m.qp_state = IBV_QPS_RTS;
	MUST(!ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN));
	return qp;
}

/* A UD extended QP: SEND_WITH_IMM to the address ibv_wr_set_ud_addr
 * names, with the address handle's traffic class, which the receive's GRH
 * gives back through ibv_init_ah_from_wc (the daemon traces, so it reads
 * each datagram's class); RDMA_WRITE refused on UD was checked in
 * qp_ex. */
static void qp_ex_ud(struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	struct ibv_qp *qs = ud_qp(&a), *qr = ud_qp(NULL);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qs);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .dgid = gid, .hop_limit = 64, .traffic_class = 0x48 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	struct ibv_ah_attr back;
	struct ibv_sge rsge = { .addr = (uintptr_t)dst->addr + 2048, .length = 40 + 64, .lkey = dst->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 30, .sg_list = &rsge, .num_sge = 1 }, *bad;
	struct ibv_wc wc[2], *w, *r;
	int err;

	MUST(x && ah);
	MUST(!ibv_post_recv(qr, &rwr, &bad));
	strcpy(src->addr, "ud datagram");
	ibv_wr_start(x);
	x->wr_id = 31;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htonl(0x5150));
	ibv_wr_set_ud_addr(x, ah, qr->qp_num, 0x11);
	ibv_wr_set_sge(x, src->lkey, (uintptr_t)src->addr, 12);
	err = ibv_wr_complete(x);
	wait_wcs(wc, 2);
	w = find_wc(wc, 2, 31);
	r = find_wc(wc, 2, 30);
	CHECK(!err && w && w->status == IBV_WC_SUCCESS && r && r->status == IBV_WC_SUCCESS && r->byte_len == 40 + 12 &&
		      r->src_qp == qs->qp_num && (r->wc_flags & IBV_WC_WITH_IMM) && r->imm_data == htonl(0x5150) &&
		      !strcmp((char *)dst->addr + 2048 + 40, "ud datagram"),
	      "ibv_wr_set_ud_addr: a UD SEND_WITH_IMM reaches the QP it names");
	CHECK(r && !ibv_init_ah_from_wc(ctx, 1, r, (struct ibv_grh *)((char *)dst->addr + 2048), &back) &&
		      back.is_global && !memcmp(&back.grh.dgid, &gid, sizeof(gid)) && back.grh.traffic_class == 0x48 &&
		      back.grh.hop_limit == 64,
	      "ibv_init_ah_from_wc: the sender's address, and the traffic class and hop limit it came with (%#x, %d; "
	      "want 0x48, 64)",
	      back.grh.traffic_class, back.grh.hop_limit);
	MUST(!ibv_destroy_qp(qs) && !ibv_destroy_qp(qr) && !ibv_destroy_ah(ah));
}

/* rdma_create_qp_ex makes an extended QP when its attributes ask for
 * send_ops_flags, as librdmacm's (through ibv_create_qp_ex), and refuses
 * what ibv_create_qp_ex refuses. */
static void cm_qp_ex(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	struct ibv_qp_init_attr_ex a = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO,
	};
	struct rdma_cm_id *id;
	struct ibv_qp_ex *x;

	MUST(inet_pton(AF_INET, cm_ip, &addr.sin_addr) == 1);
	MUST(!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP));
	MUST(!rdma_bind_addr(id, (struct sockaddr *)&addr));
	errno = 0;
	CHECK(rdma_create_qp_ex(id, &a) && errno == EOPNOTSUPP && !id->qp,
	      "rdma_create_qp_ex refuses IBV_QP_EX_WITH_TSO with EOPNOTSUPP");
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	CHECK(!rdma_create_qp_ex(id, &a) && id->qp && (x = ibv_qp_to_qp_ex(id->qp)) && x->wr_send && x->wr_start &&
		      id->send_cq && id->recv_cq,
	      "rdma_create_qp_ex with send_ops_flags makes an extended QP, and its CQs");
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* A child fork() made of this process, which loaded libsoftnic, cannot
 * use it (its Go runtime does not survive fork): the calls that open a
 * device fail there at once with EOPNOTSUPP instead of hanging, and the
 * parent goes on as before. */
static void forked_child(struct ibv_mr *src, struct ibv_mr *dst)
{
	int status;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	MUST(pid >= 0);
	if (!pid) {
		int bad = 0;

		alarm(10); /* a call that hangs fails the check */
		errno = 0;
		if (ibv_get_device_list(NULL) || errno != EOPNOTSUPP)
			bad |= 1;
		errno = 0;
		if (ibv_open_device(ctx->device) || errno != EOPNOTSUPP)
			bad |= 2;
		errno = 0;
		if (rdma_create_event_channel() || errno != EOPNOTSUPP)
			bad |= 4;
		_exit(bad);
	}
	MUST(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "in a forked child ibv_get_device_list, ibv_open_device and rdma_create_event_channel fail with EOPNOTSUPP "
	      "(exit %d, signal %d)",
	      WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	strcpy(src->addr, "after the fork");
	struct ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, src->addr, 15, src->lkey, (uintptr_t)dst->addr, dst->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(dst->addr, "after the fork"), "the parent WRITEs after its child's calls");
}

/* mgid_of writes the IPv4-mapped GID of the IPv4 address a. */
static void mgid_of(union ibv_gid *g, const char *a)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	MUST(inet_pton(AF_INET, a, &g->raw[12]) == 1);
}

static void verbs_multicast(void)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *ud = ibv_create_qp(pd, &a);
	union ibv_gid mgid;

	MUST(ud);
	mgid_of(&mgid, "239.8.8.8");
	CHECK(ibv_attach_mcast(ud, &gid, 0) == EINVAL, "ibv_attach_mcast of a unicast GID is EINVAL");
	CHECK(ibv_attach_mcast(qa, &mgid, 0) == EINVAL, "ibv_attach_mcast of an RC QP is EINVAL");
	CHECK(ibv_detach_mcast(ud, &mgid, 0) == EINVAL, "ibv_detach_mcast of a group not attached to is EINVAL");
	CHECK(!ibv_attach_mcast(ud, &mgid, 0) && !ibv_attach_mcast(ud, &mgid, 0), "ibv_attach_mcast, twice");
	CHECK(!ibv_detach_mcast(ud, &mgid, 0) && ibv_detach_mcast(ud, &mgid, 0) == EINVAL,
	      "ibv_detach_mcast once, then EINVAL: attached twice is attached once");
	MUST(!ibv_destroy_qp(ud));
}

/* join_is checks that rdma_join_multicast_ex fails with errno want. */
static void join_is(struct rdma_cm_id *id, uint32_t mask, uint32_t flags, struct sockaddr *addr, int want, const char *what)
{
	struct rdma_cm_join_mc_attr_ex attr = { .comp_mask = mask, .join_flags = flags, .addr = addr };

	errno = 0;
	CHECK(rdma_join_multicast_ex(id, &attr, NULL) == -1 && errno == want, "rdma_join_multicast_ex %s is %s", what,
	      strerror(want));
}

static void cm_multicast(void)
{
	const uint32_t both = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	struct sockaddr_in group = { .sin_family = AF_INET }, other = group, unicast = group, local = group;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id, *tcp;
	union ibv_gid mgid;
	int context;

	MUST(ch && inet_pton(AF_INET, "239.8.8.9", &group.sin_addr) == 1 && inet_pton(AF_INET, "239.8.8.10", &other.sin_addr) == 1);
	MUST(inet_pton(AF_INET, cm_ip, &unicast.sin_addr) == 1 && inet_pton(AF_INET, cm_ip, &local.sin_addr) == 1);
	mgid_of(&mgid, "239.8.8.9");
	MUST(!rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) && !rdma_create_id(NULL, &tcp, NULL, RDMA_PS_TCP));
	join_is(id, both, RDMA_MC_JOIN_FLAG_FULLMEMBER, (struct sockaddr *)&group, EINVAL, "before rdma_bind_addr");
	MUST(!rdma_bind_addr(id, (struct sockaddr *)&local) && !rdma_bind_addr(tcp, (struct sockaddr *)&local));
	join_is(tcp, both, RDMA_MC_JOIN_FLAG_FULLMEMBER, (struct sockaddr *)&group, EINVAL, "of an RDMA_PS_TCP id");
	join_is(id, RDMA_CM_JOIN_MC_ATTR_RESERVED, 0, (struct sockaddr *)&group, EOPNOTSUPP, "with an unknown comp_mask bit");
	join_is(id, RDMA_CM_JOIN_MC_ATTR_ADDRESS, 0, (struct sockaddr *)&group, EINVAL, "without JOIN_FLAGS");
	join_is(id, both, RDMA_MC_JOIN_FLAG_RESERVED, (struct sockaddr *)&group, EINVAL, "with an unknown join flag");
	join_is(id, both, RDMA_MC_JOIN_FLAG_FULLMEMBER, (struct sockaddr *)&unicast, EINVAL, "of a unicast address");

	struct ibv_qp_init_attr qa_attr = {
		.qp_type = IBV_QPT_UD, .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	MUST(!rdma_create_qp(id, NULL, &qa_attr)); /* in a PD of the id's context */
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rsge = { .addr = (uintptr_t)buf, .length = 2048, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *bad;
	MUST(mr && !ibv_post_recv(id->qp, &rwr, &bad));

	CHECK(!rdma_join_multicast(id, (struct sockaddr *)&group, &context), "rdma_join_multicast of an RDMA_PS_UDP id");
	CHECK(!rdma_get_cm_event(ch, &ev) && ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && ev->id == id &&
		      ev->param.ud.private_data == &context && ev->param.ud.qp_num == 0xFFFFFF &&
		      ev->param.ud.qkey == RDMA_UDP_QKEY && ev->param.ud.ah_attr.is_global &&
		      !memcmp(&ev->param.ud.ah_attr.grh.dgid, &mgid, 16),
	      "MULTICAST_JOIN: the context, the multicast QPN, RDMA_UDP_QKEY and the group's GID (%s)",
	      ev ? rdma_event_str(ev->event) : "none");
	struct ibv_ah *ah = ev ? ibv_create_ah(id->pd, &ev->param.ud.ah_attr) : NULL;
	CHECK(ah != NULL, "ibv_create_ah of the group's address vector");
	if (ev)
		rdma_ack_cm_event(ev);

	strcpy(buf + 3000, "to the group");
	struct ibv_sge ssge = { .addr = (uintptr_t)buf + 3000, .length = 13, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = 0xFFFFFF, .remote_qkey = RDMA_UDP_QKEY } }, *sbad;
	int got = 0;
	CHECK(ah && !ibv_post_send(id->qp, &swr, &sbad), "a SEND to the group from the group's own QP");
	for (int tries = 0; ah && got < 2 && tries < 10000; tries++) {
		struct ibv_wc wc;
		if (ibv_poll_cq(id->send_cq, 1, &wc) == 1 || ibv_poll_cq(id->recv_cq, 1, &wc) == 1) {
			got++;
			CHECK(wc.status == IBV_WC_SUCCESS && (wc.wr_id == 2 || !strcmp(buf + 40, "to the group")),
			      "the SEND to the group completes, and the QP, attached to it, receives it (wr_id %llu)",
			      (unsigned long long)wc.wr_id);
		} else {
			usleep(1000);
		}
	}
	CHECK(got == 2, "two completions: the send and the receive");

	errno = 0;
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&other) == -1 && errno == EADDRNOTAVAIL,
	      "rdma_leave_multicast of a group not joined is EADDRNOTAVAIL");
	CHECK(!rdma_leave_multicast(id, (struct sockaddr *)&group) && ibv_detach_mcast(id->qp, &mgid, 0) == EINVAL,
	      "rdma_leave_multicast detaches the QP");
	struct rdma_cm_join_mc_attr_ex sendonly = { .comp_mask = both, .join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
		.addr = (struct sockaddr *)&group };
	ev = NULL;
	CHECK(!rdma_join_multicast_ex(id, &sendonly, NULL) && !rdma_get_cm_event(ch, &ev) &&
		      ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && ibv_detach_mcast(id->qp, &mgid, 0) == EINVAL,
	      "RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER joins without attaching the QP");
	if (ev)
		rdma_ack_cm_event(ev);
	CHECK(!rdma_leave_multicast(id, (struct sockaddr *)&group), "rdma_leave_multicast of the send-only join");
	if (ah)
		ibv_destroy_ah(ah);
	rdma_destroy_qp(id);
	MUST(!ibv_dereg_mr(mr));
	free(buf);
	rdma_destroy_id(id);
	rdma_destroy_id(tcp);
	rdma_destroy_event_channel(ch);
}

/* open_device opens the device and makes the objects the checks share:
 * pd, cq, and qa and qb connected to each other. */
static void open_device(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);

	MUST(list && list[0]);
	MUST((ctx = ibv_open_device(list[0])));
	ibv_free_device_list(list);
	MUST((pd = ibv_alloc_pd(ctx)));
	MUST((cq = ibv_create_cq(ctx, 64, NULL, NULL, 0)));
	MUST(!ibv_query_gid(ctx, 1, 0, &gid));
	qa = make_qp();
	qb = make_qp();
	connect_qps();
}

/* A child forked before the program's first call into libsoftnic starts a
 * Go runtime of its own, as the child of a server that forks for each
 * client does (qperf): it opens the device and WRITEs between two QPs. */
static void fork_before_use(void)
{
	int status;
	pid_t pid = fork();

	MUST(pid >= 0);
	if (!pid) {
		char *a = calloc(1, 64), *b = calloc(1, 64);

		alarm(20); /* a call that hangs fails the check */
		open_device();
		struct ibv_mr *src = ibv_reg_mr(pd, a, 64, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_mr *dst = ibv_reg_mr(pd, b, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		MUST(src && dst);
		strcpy(a, "in the child");
		struct ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, a, 13, src->lkey, (uintptr_t)b, dst->rkey);
		_exit(wc.status == IBV_WC_SUCCESS && !strcmp(b, "in the child") ? 0 : 1);
	}
	MUST(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a child forked before the first call opens the device and WRITEs (exit %d, signal %d)",
	      WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s IP PORT FILE\n", argv[0]);
		return 2;
	}
	cm_ip = argv[1];
	cm_port = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	fork_before_use();
	open_device();
	char *sbuf = calloc(1, 4096), *dbuf = calloc(1, 4096);
	struct ibv_mr *src = ibv_reg_mr(pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dst = ibv_reg_mr(pd, dbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST(src && dst);

	registration_rules(src);
	program_memory(src, argv[3]);
	bad_rkey(src, dst);
	post_read();
	srq_limit(src, dst);
	resize_cq(src, dst);
	solicited_events(src, dst);
	notify_next_completion(src, dst);
	wait_for_event(src, dst);
	signal_interrupts_wait(src, dst);
	destroy_qp_discards(src, dst);
	migrate_id();
	rereg_mr(src);
	getaddrinfo_hints();
	listen_any_port();
	destroy_id_events();
	query_device_ex();
	on_demand_paging(src);
	cq_ex(src, dst);
	qp_ex(src, dst);
	qp_ex_ops(src, dst);
	qp_ex_ud(src, dst);
	cm_qp_ex();
	forked_child(src, dst);
	verbs_multicast();
	cm_multicast();

	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
