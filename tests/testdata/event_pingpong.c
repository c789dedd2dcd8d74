/*
 * A ping-pong of 8-byte SENDs between two RC QPs of one process, each side
 * waiting for its receive through its CQ's completion channel, as an
 * event-driven program does: poll the CQ, arm it (ibv_req_notify_cq),
 * poll again, then wait for the event and take it (ibv_get_cq_event,
 * ibv_ack_cq_events). With "poll" the channels are non-blocking and each
 * side sleeps in poll(2) on the channel's descriptor, as programs with an
 * event loop do; with "block" it sleeps in ibv_get_cq_event.
 *
 * Usage: event_pingpong poll|block ROUND_TRIPS. It prints "connected" once
 * its QPs are, then the median and 99th percentile round trip, and exits 0
 * once every round trip completed; 1 on any failure, such as the device
 * gone (a completion channel's waiter wakes then, and ibv_poll_cq fails).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct side {
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[64];
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static int use_poll, trips;
static struct side ping, pong;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void make_side(struct side *s)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };

	s->ch = ibv_create_comp_channel(ctx);
	if (!s->ch)
		die("ibv_create_comp_channel");
	if (use_poll && fcntl(s->ch->fd, F_SETFL, fcntl(s->ch->fd, F_GETFL) | O_NONBLOCK))
		die("fcntl");
	s->cq = ibv_create_cq(ctx, 64, NULL, s->ch, 0);
	if (!s->cq)
		die("ibv_create_cq");
	a.send_cq = a.recv_cq = s->cq;
	s->qp = ibv_create_qp(pd, &a);
	s->mr = ibv_reg_mr(pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!s->qp || !s->mr)
		die("ibv_create_qp, ibv_reg_mr");
}

/* connect_to moves s's QP to RTS, connected to peer's, on the device's GID. */
static void connect_to(struct side *s, struct side *peer, union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static void post_recv(struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)s->buf, sizeof(s->buf), s->mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(s->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void send8(struct side *s)
{
	struct ibv_sge sge = { (uintptr_t)s->buf, 8, s->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;

	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send");
}

/* received polls s's CQ: 1 for a receive completion, 0 for none. */
static int received(struct side *s)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(s->cq, 1, &wc)) > 0) {
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "completion: %s\n", ibv_wc_status_str(wc.status));
			exit(1);
		}
		if (wc.opcode == IBV_WC_RECV)
			return 1;
	}
	if (n < 0)
		die("ibv_poll_cq");
	return 0;
}

/* wait_recv waits for s's next receive through its completion channel,
 * and posts the receive again. */
static void wait_recv(struct side *s)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	while (!received(s)) {
		if (ibv_req_notify_cq(s->cq, 0))
			die("ibv_req_notify_cq");
		if (received(s))
			break;
		if (use_poll) {
			struct pollfd p = { .fd = s->ch->fd, .events = POLLIN };
			int n;

			/* A signal may end the wait: libsoftnic's Go runtime
			 * preempts a thread that ran Go code with SIGURG. */
			while ((n = poll(&p, 1, 10000)) < 0 && errno == EINTR)
				;
			if (n != 1) {
				fprintf(stderr, "no event in 10 s\n");
				exit(1);
			}
		}
		if (ibv_get_cq_event(s->ch, &cq, &cq_ctx))
			die("ibv_get_cq_event");
		ibv_ack_cq_events(cq, 1);
	}
	post_recv(s);
}

static void *echo(void *arg)
{
	(void)arg;
	for (int i = 0; i < trips; i++) {
		wait_recv(&pong);
		send8(&pong);
	}
	return NULL;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	union ibv_gid gid;
	pthread_t t;
	double *rtt;
	int n;

	if (argc != 3 || (strcmp(argv[1], "poll") && strcmp(argv[1], "block")) || (trips = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: event_pingpong poll|block ROUND_TRIPS\n");
		return 2;
	}
	use_poll = !strcmp(argv[1], "poll");
	list = ibv_get_device_list(&n);
	if (!list || !n) {
		fprintf(stderr, "no RDMA device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd || ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_open_device, ibv_alloc_pd, ibv_query_gid");
	make_side(&ping);
	make_side(&pong);
	connect_to(&ping, &pong, &gid);
	connect_to(&pong, &ping, &gid);
	post_recv(&ping);
	post_recv(&pong);
	printf("connected\n");
	fflush(stdout);
	rtt = malloc(trips * sizeof(*rtt));
	if (!rtt || pthread_create(&t, NULL, echo, NULL))
		die("malloc, pthread_create");
	for (int i = 0; i < trips; i++) {
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		send8(&ping);
		wait_recv(&ping);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		rtt[i] = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
	}
	pthread_join(t, NULL);
	qsort(rtt, trips, sizeof(*rtt), by_value);
	printf("%s: %d round trips, median %.1f us, p99 %.1f us\n", argv[1], trips, rtt[trips / 2], rtt[trips * 99 / 100]);
	return 0;
}
