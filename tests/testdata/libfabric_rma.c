/*
 * Data through libfabric: two processes, a server and a client, connect
 * with an endpoint of libfabric's verbs provider (msg: FI_EP_MSG over
 * rdma_cm, fi_listen/fi_connect/fi_accept) or of verbs;ofi_rxm (rdm:
 * FI_EP_RDM with an address vector, the endpoints' names exchanged over a
 * TCP connection), and move data checking every byte: fi_send/fi_recv of
 * 64 B, 4 KiB and 1 MiB each way, fi_write and fi_read of 64 KiB into and
 * out of a region the server registered and whose address and key it
 * sends, and fi_atomic/fi_fetch_atomic FI_SUM on a uint64 where
 * fi_query_atomic says the endpoint has them (not fi_fetch_atomic on a
 * verbs FI_EP_MSG of libfabric before 2.2, which adds the operand's
 * address: ofiwg/libfabric#10923). Regions follow the mr_mode
 * the provider asks for (FI_MR_LOCAL descriptors, FI_MR_VIRT_ADDR
 * addresses, FI_MR_PROV_KEY keys).
 *
 * Usage: libfabric_rma msg|rdm server IP PORT
 *        libfabric_rma msg|rdm client MYIP PORT SERVERIP
 * IP is the address of the device to use. The server prints "ready" once
 * a client may start, and "done sending" once its last send completed.
 * The client ends once its standard input does, which the test closes
 * once the server is done sending, and the server once its own does,
 * which the test closes once the client has exited. Each check prints a
 * line; the exit status is 0 only if every check passed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "check.h"

#define NSIZES 3
#define BIG (1 << 20)
#define RMA_LEN (64 << 10)
#define COUNTER_START 1000
#define TIMEOUT_S 20

static const size_t sizes[NSIZES] = {64, 4096, BIG};

/* ctrl is the server's and client's small messages: the server's region
 * (addr, key) first, the client's expected counter at the end. */
struct ctrl {
	uint64_t addr, key, counter, expect;
};

/* mem is all a process moves, in one registered region. */
struct mem {
	unsigned char rx[NSIZES][BIG], tx[BIG];
	unsigned char rma[2 * RMA_LEN]; /* written by fi_write, read by fi_read */
	uint64_t counter, operand, result;
	struct ctrl ctrl_rx[2], ctrl_tx;
};

/* op is one posted operation; its context comes back in its completion. */
struct op {
	struct fi_context ctx;
	int done, err;
};

static int rdm;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_mr *mr;
static void *desc;
static fi_addr_t peer;
static struct mem *m;

/* MUST ends the program when a libfabric call fails: nothing after it can
 * be checked. */
#define MUST(call)                                                                       \
	do {                                                                             \
		int rc_ = (int)(call);                                                   \
		if (rc_) {                                                               \
			printf("FAIL: %s: %d %s\n", #call, rc_, fi_strerror(-rc_)); \
			exit(2);                                                         \
		}                                                                        \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* progress reads the completions waiting and marks their operations. */
static void progress(void)
{
	struct fi_cq_entry e[8];
	struct fi_cq_err_entry err;
	ssize_t n = fi_cq_read(cq, e, 8);
	for (ssize_t i = 0; i < n; i++)
		((struct op *)e[i].op_context)->done = 1;
	if (n == -FI_EAVAIL) {
		memset(&err, 0, sizeof err);
		if (fi_cq_readerr(cq, &err, 0) == 1) {
			struct op *o = err.op_context;
			printf("completion error: %s (prov_errno %d: %s)\n", fi_strerror(err.err), err.prov_errno,
			       fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0));
			o->done = 1;
			o->err = err.err ? err.err : FI_EIO;
		}
	} else if (n < 0 && n != -FI_EAGAIN) {
		printf("FAIL: fi_cq_read: %s\n", fi_strerror((int)-n));
		exit(2);
	}
}

/* wait progresses until o completes; it is 0 if o completed well. */
static int wait_op(struct op *o, const char *what)
{
	double end = now() + TIMEOUT_S;
	while (!o->done) {
		if (now() > end) {
			printf("FAIL: %s: no completion in %d s\n", what, TIMEOUT_S);
			exit(2);
		}
		progress();
	}
	return o->err;
}

/* POST posts an operation, progressing while the provider is busy. */
#define POST(call)                                  \
	do {                                        \
		ssize_t r_;                         \
		while ((r_ = (call)) == -FI_EAGAIN) \
			progress();                 \
		MUST(r_);                           \
	} while (0)

static void post_recv(void *buf, size_t len, struct op *o)
{
	POST(fi_recv(ep, buf, len, desc, FI_ADDR_UNSPEC, &o->ctx));
}

/* send sends len bytes of buf and waits for their completion. */
static int send_wait(void *buf, size_t len, const char *what)
{
	struct op o = {0};
	POST(fi_send(ep, buf, len, desc, peer, &o.ctx));
	return wait_op(&o, what);
}

static unsigned char pattern(size_t i, int seed)
{
	return (unsigned char)(i * 131 + (i >> 9) + seed * 17);
}

static void fill(unsigned char *b, size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pattern(i, seed);
}

/* mismatch is the offset of the first byte of b that is not the
 * pattern's, or -1. */
static long mismatch(const unsigned char *b, size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pattern(i, seed))
			return (long)i;
	return -1;
}

/* remote is how a peer addresses p in this process's region. */
static uint64_t remote(struct fi_info *fi, void *p)
{
	if (fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
		return (uint64_t)(uintptr_t)p;
	return (uint64_t)((unsigned char *)p - (unsigned char *)m);
}

static struct fi_info *getinfo(const char *node, const char *service, uint64_t flags, const char *src, int type)
{
	struct fi_info *hints = fi_allocinfo(), *fi;
	struct sockaddr_in *sin;
	int rc;

	hints->ep_attr->type = type;
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(rdm ? "verbs;ofi_rxm" : "verbs");
	hints->addr_format = FI_SOCKADDR_IN;
	if (src) {
		sin = calloc(1, sizeof *sin);
		sin->sin_family = AF_INET;
		if (inet_pton(AF_INET, src, &sin->sin_addr) != 1) {
			printf("FAIL: bad address %s\n", src);
			exit(2);
		}
		hints->src_addr = sin;
		hints->src_addrlen = sizeof *sin;
	}
	rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service, flags, hints, &fi);
	if (rc) {
		printf("FAIL: fi_getinfo(%s, %s) for %s: %s\n", node, service ? service : "NULL",
		       hints->fabric_attr->prov_name, fi_strerror(-rc));
		exit(2);
	}
	fi_freeinfo(hints);
	return fi;
}

/* open_ep opens the domain, region, CQ and endpoint for fi and posts the
 * receives, in the order their messages come. */
static void open_ep(struct fi_info *fi, struct op *rx, int nrx, void **rxbuf, size_t *rxlen)
{
	struct fi_cq_attr cq_attr = {.size = fi->tx_attr->size + fi->rx_attr->size,
				     .format = FI_CQ_FORMAT_CONTEXT,
				     .wait_obj = FI_WAIT_NONE};
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};

	MUST(fi_domain(fabric, fi, &domain, NULL));
	MUST(fi_mr_reg(domain, m, sizeof *m,
		       FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr,
		       NULL));
	desc = fi_mr_desc(mr);
	MUST(fi_cq_open(domain, &cq_attr, &cq, NULL));
	MUST(fi_endpoint(domain, fi, &ep, NULL));
	MUST(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	if (rdm) {
		MUST(fi_av_open(domain, &av_attr, &av, NULL));
		MUST(fi_ep_bind(ep, &av->fid, 0));
	} else {
		MUST(fi_ep_bind(ep, &eq->fid, 0));
	}
	MUST(fi_enable(ep));
	memset(rx, 0, nrx * sizeof *rx);
	for (int i = 0; i < nrx; i++)
		post_recv(rxbuf[i], rxlen[i], &rx[i]);
}

/* cm_event waits for a connection manager event. */
static void cm_event(uint32_t want, struct fi_info **info)
{
	uint64_t buf[32];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_eq_err_entry err;
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, e, sizeof buf, TIMEOUT_S * 1000, 0);
	if (n == -FI_EAVAIL) {
		memset(&err, 0, sizeof err);
		fi_eq_readerr(eq, &err, 0);
		printf("FAIL: connection: %s (%s)\n", fi_strerror(err.err),
		       fi_eq_strerror(eq, err.prov_errno, err.err_data, NULL, 0));
		exit(2);
	}
	if (n < 0 || event != want) {
		printf("FAIL: fi_eq_sread: %zd %s, event %u, want %u\n", n, n < 0 ? fi_strerror((int)-n) : "",
		       event, want);
		exit(2);
	}
	if (info)
		*info = e->info;
}

/* swap_names sends this endpoint's name on TCP connection s and inserts
 * the peer's, which it reads from s, into the address vector. */
static void swap_names(int s)
{
	unsigned char name[256], theirs[256];
	size_t len = sizeof name - 1;
	uint8_t n;

	MUST(fi_getname(&ep->fid, name + 1, &len));
	name[0] = (unsigned char)len;
	if (write(s, name, len + 1) != (ssize_t)(len + 1) || read(s, &n, 1) != 1 ||
	    recv(s, theirs, n, MSG_WAITALL) != n) {
		printf("FAIL: exchanging endpoint names over TCP\n");
		exit(2);
	}
	if (fi_av_insert(av, theirs, 1, &peer, 0, NULL) != 1) {
		printf("FAIL: fi_av_insert\n");
		exit(2);
	}
	close(s);
}

/* tcp_socket is a TCP socket for the address ip:port, which it puts in
 * *sin. */
static int tcp_socket(const char *ip, const char *port, struct sockaddr_in *sin)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	memset(sin, 0, sizeof *sin);
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)atoi(port));
	inet_pton(AF_INET, ip, &sin->sin_addr);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	return s;
}

static void server(const char *ip, const char *port)
{
	struct fi_info *fi = getinfo(ip, port, FI_SOURCE, NULL, rdm ? FI_EP_RDM : FI_EP_MSG), *conn;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct fid_pep *pep = NULL;
	struct op rx[NSIZES + 1];
	void *rxbuf[NSIZES + 1];
	size_t rxlen[NSIZES + 1];
	struct sockaddr_in sin;
	int l = -1;

	for (int i = 0; i < NSIZES; i++)
		rxbuf[i] = m->rx[i], rxlen[i] = sizes[i];
	rxbuf[NSIZES] = &m->ctrl_rx[0], rxlen[NSIZES] = sizeof(struct ctrl);
	fill(m->rma + RMA_LEN, RMA_LEN, 'r');
	m->counter = COUNTER_START;

	MUST(fi_fabric(fi->fabric_attr, &fabric, NULL));
	if (rdm) {
		open_ep(fi, rx, NSIZES + 1, rxbuf, rxlen);
		l = tcp_socket(ip, port, &sin);
		if (bind(l, (struct sockaddr *)&sin, sizeof sin) || listen(l, 1)) {
			perror("FAIL: TCP listen");
			exit(2);
		}
	} else {
		MUST(fi_eq_open(fabric, &eq_attr, &eq, NULL));
		MUST(fi_passive_ep(fabric, fi, &pep, NULL));
		MUST(fi_pep_bind(pep, &eq->fid, 0));
		MUST(fi_listen(pep));
	}
	printf("ready\n");
	fflush(stdout);
	if (rdm) {
		swap_names(accept(l, NULL, NULL));
		close(l);
	} else {
		cm_event(FI_CONNREQ, &conn);
		open_ep(conn, rx, NSIZES + 1, rxbuf, rxlen);
		MUST(fi_accept(ep, NULL, 0));
		cm_event(FI_CONNECTED, NULL);
		fi_freeinfo(conn);
	}
	CHECK(1, "%s connected", rdm ? "verbs;ofi_rxm FI_EP_RDM" : "verbs FI_EP_MSG");

	m->ctrl_tx = (struct ctrl){
		.addr = remote(fi, m->rma), .key = fi_mr_key(mr), .counter = remote(fi, &m->counter)};
	CHECK(send_wait(&m->ctrl_tx, sizeof m->ctrl_tx, "send region") == 0, "fi_send: region's address and key");
	for (int i = 0; i < NSIZES; i++) {
		long bad;
		int err = wait_op(&rx[i], "fi_recv");
		CHECK(!err && (bad = mismatch(m->rx[i], sizes[i], 'c' + i)) < 0,
		      "fi_recv: %zu bytes from the client%s", sizes[i], err ? ", completion error" : "");
		fill(m->tx, sizes[i], 's' + i);
		CHECK(send_wait(m->tx, sizes[i], "fi_send") == 0, "fi_send: %zu bytes to the client", sizes[i]);
	}
	CHECK(wait_op(&rx[NSIZES], "fi_recv done") == 0, "fi_recv: the client's end");
	long bad = mismatch(m->rma, RMA_LEN, 'w');
	CHECK(bad < 0, "the client's fi_write: %d bytes in the region (first bad byte %ld)", RMA_LEN, bad);
	bad = mismatch(m->rma + RMA_LEN, RMA_LEN, 'r');
	CHECK(bad < 0, "the bytes the client read are as they were (first bad byte %ld)", bad);
	CHECK(m->counter == m->ctrl_rx[0].expect, "the client's atomics: counter %llu, want %llu",
	      (unsigned long long)m->counter, (unsigned long long)m->ctrl_rx[0].expect);
	CHECK(send_wait(&m->ctrl_tx, sizeof m->ctrl_tx, "send end") == 0, "fi_send: the server's end");
	printf("done sending\n");
	/* The endpoint stays until the client has exited: closed before, it
	 * would take the connection down under the server's end, which the
	 * client may not have polled yet (a destroyed QP's completions go
	 * with it). */
	while (getchar() != EOF)
		;
	if (pep)
		fi_close(&pep->fid);
	fi_freeinfo(fi);
}

/* atomic adds operand to the server's counter with fi_atomic (fetch 0) or
 * fi_fetch_atomic, if the endpoint has it; expect follows the counter. */
static void atomic(struct ctrl *region, int fetch, uint64_t operand, uint64_t *expect)
{
	const char *name = fetch ? "fi_fetch_atomic" : "fi_atomic";
	struct fi_atomic_attr attr;
	struct op o = {0};
	int rc = fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, fetch ? FI_FETCH_ATOMIC : 0);
	if (rc) {
		printf("skip: %s FI_SUM FI_UINT64: fi_query_atomic: %s\n", name, fi_strerror(-rc));
		return;
	}
	if (!rdm && fi_version() < FI_VERSION(2, 2)) {
		printf("skip: %s FI_SUM FI_UINT64: libfabric %u.%u's verbs provider adds the operand's address, "
		       "not its value (ofiwg/libfabric#10923)\n",
		       name, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
		return;
	}
	m->operand = operand;
	m->result = 0;
	if (fetch)
		POST(fi_fetch_atomic(ep, &m->operand, 1, desc, &m->result, desc, peer, region->counter, region->key,
				     FI_UINT64, FI_SUM, &o.ctx));
	else
		POST(fi_atomic(ep, &m->operand, 1, desc, peer, region->counter, region->key, FI_UINT64, FI_SUM,
			       &o.ctx));
	rc = wait_op(&o, name);
	if (fetch)
		CHECK(!rc && m->result == *expect, "%s FI_SUM %llu on a uint64: fetched %llu, want %llu", name,
		      (unsigned long long)operand, (unsigned long long)m->result, (unsigned long long)*expect);
	else
		CHECK(!rc, "%s FI_SUM %llu on a uint64", name, (unsigned long long)operand);
	if (!rc)
		*expect += operand;
}

/* rma reads or writes len bytes of the server's region at off. */
static int rma(struct ctrl *region, int write, void *buf, size_t len, size_t off)
{
	struct op o = {0};
	if (write)
		POST(fi_write(ep, buf, len, desc, peer, region->addr + off, region->key, &o.ctx));
	else
		POST(fi_read(ep, buf, len, desc, peer, region->addr + off, region->key, &o.ctx));
	return wait_op(&o, write ? "fi_write" : "fi_read");
}

static void client(const char *myip, const char *port, const char *serverip)
{
	struct fi_info *fi;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct op rx[NSIZES + 2];
	void *rxbuf[NSIZES + 2];
	size_t rxlen[NSIZES + 2];
	struct sockaddr_in sin;
	uint64_t expect = COUNTER_START;
	int s;

	rxbuf[0] = &m->ctrl_rx[0], rxlen[0] = sizeof(struct ctrl);
	for (int i = 0; i < NSIZES; i++)
		rxbuf[i + 1] = m->rx[i], rxlen[i + 1] = sizes[i];
	rxbuf[NSIZES + 1] = &m->ctrl_rx[1], rxlen[NSIZES + 1] = sizeof(struct ctrl);

	if (rdm)
		fi = getinfo(myip, NULL, FI_SOURCE, NULL, FI_EP_RDM);
	else
		fi = getinfo(serverip, port, 0, myip, FI_EP_MSG);
	MUST(fi_fabric(fi->fabric_attr, &fabric, NULL));
	if (!rdm)
		MUST(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	open_ep(fi, rx, NSIZES + 2, rxbuf, rxlen);
	if (rdm) {
		s = tcp_socket(serverip, port, &sin);
		if (connect(s, (struct sockaddr *)&sin, sizeof sin)) {
			perror("FAIL: TCP connect");
			exit(2);
		}
		swap_names(s);
	} else {
		MUST(fi_connect(ep, fi->dest_addr, NULL, 0));
		cm_event(FI_CONNECTED, NULL);
	}
	CHECK(1, "%s connected", rdm ? "verbs;ofi_rxm FI_EP_RDM" : "verbs FI_EP_MSG");

	CHECK(wait_op(&rx[0], "fi_recv region") == 0, "fi_recv: the server's region");
	struct ctrl region = m->ctrl_rx[0];
	for (int i = 0; i < NSIZES; i++) {
		long bad;
		fill(m->tx, sizes[i], 'c' + i);
		CHECK(send_wait(m->tx, sizes[i], "fi_send") == 0, "fi_send: %zu bytes to the server", sizes[i]);
		int err = wait_op(&rx[i + 1], "fi_recv");
		CHECK(!err && (bad = mismatch(m->rx[i], sizes[i], 's' + i)) < 0,
		      "fi_recv: %zu bytes from the server%s", sizes[i], err ? ", completion error" : "");
	}

	fill(m->rma, RMA_LEN, 'w');
	CHECK(rma(&region, 1, m->rma, RMA_LEN, 0) == 0, "fi_write: %d bytes", RMA_LEN);
	memset(m->rma, 0, sizeof m->rma);
	int err = rma(&region, 0, m->rma, RMA_LEN, 0);
	long bad = err ? 0 : mismatch(m->rma, RMA_LEN, 'w');
	CHECK(bad < 0, "fi_read: the %d bytes fi_write wrote (first bad byte %ld)", RMA_LEN, bad);
	err = rma(&region, 0, m->rma + RMA_LEN, RMA_LEN, RMA_LEN);
	bad = err ? 0 : mismatch(m->rma + RMA_LEN, RMA_LEN, 'r');
	CHECK(bad < 0, "fi_read: %d bytes the server wrote (first bad byte %ld)", RMA_LEN, bad);

	atomic(&region, 0, 5, &expect);
	atomic(&region, 1, 7, &expect);
	m->result = 0;
	err = rma(&region, 0, &m->result, sizeof m->result, region.counter - region.addr);
	CHECK(!err && m->result == expect, "fi_read: the counter after the atomics: %llu, want %llu",
	      (unsigned long long)m->result, (unsigned long long)expect);

	m->ctrl_tx = (struct ctrl){.expect = expect};
	CHECK(send_wait(&m->ctrl_tx, sizeof m->ctrl_tx, "send end") == 0, "fi_send: the client's end");
	CHECK(wait_op(&rx[NSIZES + 1], "fi_recv end") == 0, "fi_recv: the server's end");
	/* The connection stays until the server has its end's completion:
	 * closed before, its disconnection may reach the server's rxm before
	 * that completion, and rxm then cancels the send (FI_ECANCELED), which
	 * the peer received. */
	while (getchar() != EOF)
		;
	fi_freeinfo(fi);
}

int main(int argc, char **argv)
{
	int srv = argc == 5 && !strcmp(argv[2], "server"), cli = argc == 6 && !strcmp(argv[2], "client");
	if ((!srv && !cli) || (strcmp(argv[1], "msg") && strcmp(argv[1], "rdm"))) {
		fprintf(stderr, "usage: %s msg|rdm server IP PORT\n       %s msg|rdm client MYIP PORT SERVERIP\n",
			argv[0], argv[0]);
		return 2;
	}
	rdm = !strcmp(argv[1], "rdm");
	setvbuf(stdout, NULL, _IOLBF, 0);
	m = aligned_alloc(4096, (sizeof *m + 4095) / 4096 * 4096);
	memset(m, 0, sizeof *m);
	if (srv)
		server(argv[3], argv[4]);
	else
		client(argv[3], argv[4], argv[5]);

	fi_close(&ep->fid);
	if (av)
		fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&mr->fid);
	fi_close(&domain->fid);
	if (eq)
		fi_close(&eq->fid);
	fi_close(&fabric->fid);
	free(m);
	printf("%d failed\n", failures);
	return failures != 0;
}
