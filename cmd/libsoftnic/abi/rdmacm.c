/*
 * librdmacm's entry points. Identifiers, event channels and events are
 * allocated here; the connection manager's work is the Go side's
 * (cm.go), on package nic's connection manager.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_verbs.h>

#include "softnic.h"
#include "golib.h"

#define EXPORT __attribute__((visibility("default")))

/* The calls that set errno return -1 with it. */
static int fail(int err)
{
	if (!err)
		return 0;
	errno = err;
	return -1;
}

/* The device context every rdma_cm_id uses, opened once. */
static pthread_once_t cm_once = PTHREAD_ONCE_INIT;
static struct ibv_context *cm_verbs;

static void cm_open(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);

	if (list && list[0])
		cm_verbs = ibv_open_device(list[0]);
	ibv_free_device_list(list);
}

/* sn_cm_verbs is the context of rdma_cm_ids, NULL (errno ENODEV) without a
 * daemon, or EOPNOTSUPP in a forked child. */
struct ibv_context *sn_cm_verbs(void)
{
	if (sn_refuse("rdma_cm"))
		return NULL;
	pthread_once(&cm_once, cm_open);
	if (!cm_verbs)
		errno = ENODEV;
	return cm_verbs;
}

EXPORT struct ibv_context **rdma_get_devices(int *num)
{
	struct ibv_context **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = sn_cm_verbs();
	if (num)
		*num = list[0] ? 1 : 0;
	return list;
}

EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct sn_event_channel *ch;
	int p[2];

	if (!sn_cm_verbs())
		return NULL;
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	/* A socket pair rather than a pipe: rdma_migrate_id takes back the
	 * bytes of the events it moves without waiting (MSG_DONTWAIT). */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p)) {
		free(ch);
		return NULL;
	}
	ch->ch.fd = p[0];
	ch->w = p[1];
	snCreateEventChannel(ch);
	return &ch->ch;
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct sn_event_channel *ch = (struct sn_event_channel *)channel;

	snDestroyEventChannel(ch);
	close(ch->ch.fd);
	close(ch->w);
	free(ch);
}

/* new_id makes an identifier of the channel (NULL: synchronous). */
static struct sn_cm_id *new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
			       enum ibv_qp_type qp_type)
{
	struct sn_cm_id *id = calloc(1, sizeof(*id));

	if (!id) {
		errno = ENOMEM;
		return NULL;
	}
	id->id.verbs = sn_cm_verbs();
	id->id.channel = channel;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qp_type;
	id->id.port_num = 1;
	snCreateID(id, (struct sn_event_channel *)channel);
	return id;
}

/* sn_new_child makes the identifier of a connection request on listen. */
struct sn_cm_id *sn_new_child(struct sn_cm_id *listen)
{
	struct sn_cm_id *id = new_id(listen->id.channel, listen->id.context, listen->id.ps, listen->id.qp_type);

	if (id) {
		id->id.route.addr.src_storage = listen->id.route.addr.src_storage;
		id->has_qp_attr = listen->has_qp_attr;
		id->qp_attr = listen->qp_attr;
		id->id.pd = listen->id.pd;
	}
	return id;
}

/* port_space_qp_type is the QP type of a port space's ids when none is
 * asked for (qp_type 0), as librdmacm's rdma_create_id has it, and 0 if
 * softnic does not serve the port space, or not with that QP type: RC in
 * the TCP port space, UD in the UDP one, either in the IB one. */
static enum ibv_qp_type port_space_qp_type(enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	switch (ps) {
	case RDMA_PS_TCP:
		return !qp_type || qp_type == IBV_QPT_RC ? IBV_QPT_RC : 0;
	case RDMA_PS_UDP:
		return !qp_type || qp_type == IBV_QPT_UD ? IBV_QPT_UD : 0;
	case RDMA_PS_IB:
		if (!qp_type)
			return IBV_QPT_RC;
		return qp_type == IBV_QPT_RC || qp_type == IBV_QPT_UD ? qp_type : 0;
	default:
		return 0;
	}
}

/* create_id is rdma_create_id for ids of QP type qp_type (0: the port
 * space's), as rdma_getaddrinfo's ai_qp_type asks for one. */
static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **idp, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct sn_cm_id *id;

	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB) {
		sn_unsupported("rdma_create_id with a port space other than RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IB");
		return -1;
	}
	qp_type = port_space_qp_type(ps, qp_type);
	if (!qp_type) {
		sn_unsupported("rdma_create_id for QP types other than RC (RDMA_PS_TCP, RDMA_PS_IB) and UD (RDMA_PS_UDP, RDMA_PS_IB)");
		return -1;
	}
	if (!sn_cm_verbs())
		return -1;
	id = new_id(channel, context, ps, qp_type);
	if (!id)
		return -1;
	*idp = &id->id;
	return 0;
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **idp, void *context,
			  enum rdma_port_space ps)
{
	return create_id(channel, idp, context, ps, 0);
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *cid)
{
	struct sn_cm_id *id = (struct sn_cm_id *)cid;

	snDestroyID(id);
	free(id);
	return 0;
}

/* to_addr converts a socket address for the Go side. */
static int to_addr(const struct sockaddr *sa, struct sn_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		a->ip[10] = a->ip[11] = 0xff;
		memcpy(&a->ip[12], &in->sin_addr, 4);
		a->port = ntohs(in->sin_port);
		return 0;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		memcpy(a->ip, &in6->sin6_addr, 16);
		a->port = ntohs(in6->sin6_port);
		return 0;
	}
	}
	return EAFNOSUPPORT;
}

/* sn_set_addr writes an address into a socket address: sockaddr_in for
 * an IPv4-mapped one, else sockaddr_in6. */
void sn_set_addr(struct sockaddr_storage *ss, const struct sn_addr *a)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memset(ss, 0, sizeof(*ss));
	if (!memcmp(a->ip, v4mapped, 12)) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, &a->ip[12], 4);
		in->sin_port = htons(a->port);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, a->ip, 16);
		in6->sin6_port = htons(a->port);
	}
}

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct sn_addr a;
	int err = to_addr(addr, &a);

	if (!err)
		err = snBindAddr((struct sn_cm_id *)id, &a);
	return fail(err);
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	return fail(snListen((struct sn_cm_id *)id, backlog));
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	struct sn_addr s, d;
	int err = to_addr(src, &s);

	(void)timeout_ms;
	if (!err)
		err = to_addr(dst, &d);
	if (!err && !dst)
		err = EINVAL;
	if (!err)
		err = snResolveAddr((struct sn_cm_id *)id, &s, &d, src != NULL);
	return fail(err);
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	return fail(snResolveRoute((struct sn_cm_id *)id));
}

/* init_qp moves a QP rdma_cm made to INIT, as librdmacm does, so that the
 * program may post receives before it connects; a UD QP, which has no
 * connection, on to RTS with rdma_cm's Q_Key (RDMA_UDP_QKEY). */
static int init_qp(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	int err;

	if (qp->qp_type != IBV_QPT_UD)
		return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	attr.qkey = RDMA_UDP_QKEY;
	err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	attr.qp_state = IBV_QPS_RTR;
	if (!err)
		err = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = 0;
	if (!err)
		err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
	return err;
}

/* make_cq makes a CQ with its own completion channel for an identifier
 * whose QP attributes name none. */
static struct ibv_cq *make_cq(struct rdma_cm_id *id, struct ibv_comp_channel **channel, int cqe)
{
	struct ibv_cq *cq;

	*channel = ibv_create_comp_channel(id->verbs);
	if (!*channel)
		return NULL;
	cq = ibv_create_cq(id->verbs, cqe > 0 ? cqe : 1, id, *channel, 0);
	if (!cq) {
		ibv_destroy_comp_channel(*channel);
		*channel = NULL;
	}
	return cq;
}

static void destroy_cqs(struct sn_cm_id *id)
{
	if (!id->own_cqs)
		return;
	if (id->id.recv_cq && id->id.recv_cq != id->id.send_cq)
		ibv_destroy_cq(id->id.recv_cq);
	if (id->id.send_cq)
		ibv_destroy_cq(id->id.send_cq);
	if (id->id.recv_cq_channel && id->id.recv_cq_channel != id->id.send_cq_channel)
		ibv_destroy_comp_channel(id->id.recv_cq_channel);
	if (id->id.send_cq_channel)
		ibv_destroy_comp_channel(id->id.send_cq_channel);
	id->id.send_cq = id->id.recv_cq = NULL;
	id->id.send_cq_channel = id->id.recv_cq_channel = NULL;
	id->own_cqs = 0;
}

/* rdma_create_qp_ex creates the id's QP with ibv_create_qp_ex (an
 * extended QP if attr asks for more than a PD), in the id's PD if attr
 * names none, with CQs of its own if attr lacks them, as librdmacm. */
EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *attr)
{
	struct sn_cm_id *id = (struct sn_cm_id *)cid;
	struct ibv_qp_init_attr_ex a = *attr;
	struct ibv_qp *qp;
	int err;

	if (!cid->verbs)
		return fail(EINVAL);
	if (!(a.comp_mask & IBV_QP_INIT_ATTR_PD) || !a.pd) {
		a.comp_mask |= IBV_QP_INIT_ATTR_PD;
		a.pd = cid->pd;
	}
	if (!a.pd) {
		a.pd = cid->pd = ibv_alloc_pd(cid->verbs);
		if (!a.pd)
			return -1;
	}
	if (!a.send_cq || !a.recv_cq) {
		if (!a.send_cq) {
			cid->send_cq = make_cq(cid, &cid->send_cq_channel, a.cap.max_send_wr);
			if (!cid->send_cq)
				return -1;
			a.send_cq = cid->send_cq;
		}
		if (!a.recv_cq) {
			cid->recv_cq = make_cq(cid, &cid->recv_cq_channel, a.cap.max_recv_wr);
			if (!cid->recv_cq) {
				err = errno;
				destroy_cqs(id);
				return fail(err);
			}
			a.recv_cq = cid->recv_cq;
		}
		id->own_cqs = 1;
	}
	a.qp_type = cid->qp_type;
	qp = ibv_create_qp_ex(cid->verbs, &a);
	if (!qp) {
		err = errno;
		destroy_cqs(id);
		return fail(err);
	}
	err = init_qp(qp);
	if (err) {
		ibv_destroy_qp(qp);
		destroy_cqs(id);
		return fail(err);
	}
	attr->cap = a.cap;
	cid->qp = qp;
	if (!cid->send_cq)
		cid->send_cq = a.send_cq;
	if (!cid->recv_cq)
		cid->recv_cq = a.recv_cq;
	cid->srq = a.srq;
	return 0;
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_context = attr->qp_context,
		.send_cq = attr->send_cq,
		.recv_cq = attr->recv_cq,
		.srq = attr->srq,
		.cap = attr->cap,
		.qp_type = attr->qp_type,
		.sq_sig_all = attr->sq_sig_all,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	int err = rdma_create_qp_ex(id, &a);

	if (!err)
		attr->cap = a.cap;
	return err;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *cid)
{
	if (cid->qp) {
		ibv_destroy_qp(cid->qp);
		cid->qp = NULL;
	}
	destroy_cqs((struct sn_cm_id *)cid);
}

/* conn_param reads what the Go side takes of an rdma_conn_param. */
static void conn_param(const struct rdma_conn_param *p, const void **data, int *len, int *rr, int *depth,
		       int *retry, int *rnr)
{
	*data = NULL;
	*len = *rr = *depth = *retry = *rnr = 0;
	if (!p)
		return;
	*data = p->private_data;
	*len = p->private_data ? p->private_data_len : 0;
	*rr = p->responder_resources;
	*depth = p->initiator_depth;
	*retry = p->retry_count;
	*rnr = p->rnr_retry_count;
}

/* qp_num is conn_param's QP number: the QP of an id with none, which the
 * program connects itself. */
static uint32_t qp_num(const struct rdma_conn_param *p)
{
	return p ? p->qp_num : 0;
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	const void *data;
	int len, rr, depth, retry, rnr;

	conn_param(param, &data, &len, &rr, &depth, &retry, &rnr);
	return fail(snConnect((struct sn_cm_id *)id, (void *)data, len, rr, depth, retry, rnr, qp_num(param)));
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	const void *data;
	int len, rr, depth, retry, rnr;

	conn_param(param, &data, &len, &rr, &depth, &retry, &rnr);
	return fail(snAccept((struct sn_cm_id *)id, (void *)data, len, rr, depth, rnr, qp_num(param)));
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return fail(snReject((struct sn_cm_id *)id, (void *)private_data, private_data ? private_data_len : 0));
}

EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	return fail(snDisconnect((struct sn_cm_id *)id));
}

EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	return fail(snEstablish((struct sn_cm_id *)id));
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct sn_cm_event *ev = calloc(1, sizeof(*ev));
	char c;
	ssize_t n;

	if (!ev)
		return fail(ENOMEM);
	/* A byte with no event was one that rdma_migrate_id moved to another
	 * channel: wait for the next. */
	do {
		n = read(channel->fd, &c, 1); /* a signal ends the wait (EINTR), as with librdmacm */
		if (n == 0) {
			/* Another thread destroyed the channel while this one
			 * waited. With librdmacm the wait goes on (closing a
			 * descriptor does not end a read of it), and programs
			 * such as rping, which exit while their event thread
			 * waits, rely on that. */
			for (;;)
				pause();
		}
		if (n != 1) {
			free(ev);
			return -1;
		}
	} while (snNextEvent((struct sn_event_channel *)channel, ev));
	*event = &ev->ev;
	return 0;
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	snAckEvent((struct sn_cm_event *)event);
	free(event);
	return 0;
}

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((size_t)event >= sizeof(names) / sizeof(names[0]))
		return "UNKNOWN EVENT";
	return names[event];
}

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT) {
		if (!optval || optlen != sizeof(uint8_t))
			return fail(EINVAL);
		return fail(snSetAckTimeout((struct sn_cm_id *)id, *(uint8_t *)optval));
	}
	if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_TOS) {
		if (!optval || optlen != sizeof(uint8_t))
			return fail(EINVAL);
		snSetTOS((struct sn_cm_id *)id, *(uint8_t *)optval);
		return 0;
	}
	/* Address reuse and IPv6-only have no effect on a softnic connection,
	 * whose ports are the device's: they are accepted. */
	if (level == RDMA_OPTION_ID && optname < RDMA_OPTION_ID_ACK_TIMEOUT)
		return 0;
	sn_unsupported("rdma_set_option (this option)");
	return -1;
}

/* rdma_init_qp_attr gives the attributes of INIT, the state rdma_cm puts a
 * QP in before it connects, and those of RTR and RTS that the connection's
 * handshake negotiated (cm_self.go), for a QP the program connects
 * itself. */
EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	if (attr->qp_state != IBV_QPS_INIT)
		return fail(snInitQPAttr((struct sn_cm_id *)id, attr, mask));
	attr->port_num = 1;
	attr->pkey_index = 0;
	attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	return 0;
}

static __be16 port_of(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

/* rdma_get_src_port of an id bound to port 0 gives it its port now, as
 * Linux does at the bind (snReservePort): a server that binds to port 0
 * tells its clients the port before it listens (qperf -cm1). */
EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	if (!port_of(&id->route.addr.src_addr))
		snReservePort((struct sn_cm_id *)id);
	return port_of(&id->route.addr.src_addr);
}

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return port_of(&id->route.addr.dst_addr);
}

/* copy_addr sets *to to a copy of the address from of len bytes (none
 * for none), returning 0, or ENOMEM. */
static int copy_addr(struct sockaddr **to, socklen_t *to_len, const struct sockaddr *from, socklen_t len)
{
	if (!from)
		return 0;
	*to = malloc(len);
	if (!*to)
		return ENOMEM;
	memcpy(*to, from, len);
	*to_len = len;
	return 0;
}

/* rdma_getaddrinfo resolves node and service as getaddrinfo does, for RC
 * connections of RDMA_PS_TCP and UD QPs of RDMA_PS_UDP, and either of
 * RDMA_PS_IB (RC unless ai_qp_type asks for UD). The resolved address is
 * the source of a passive result and the destination of an active one;
 * the hints' source address (unless node and service resolved one) and
 * destination address (with neither node nor service) are taken as
 * given, as librdmacm does: libfabric's verbs provider names its
 * endpoints so. */
EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	struct addrinfo h = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	struct rdma_addrinfo *r;
	int passive = hints && (hints->ai_flags & RAI_PASSIVE);
	enum ibv_qp_type qp_type = hints ? hints->ai_qp_type : 0;
	enum rdma_port_space ps = hints && hints->ai_port_space ? hints->ai_port_space
					: qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	int err;

	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB) {
		sn_unsupported("rdma_getaddrinfo with a port space other than RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IB");
		return -1;
	}
	qp_type = port_space_qp_type(ps, qp_type);
	if (!qp_type) {
		sn_unsupported("rdma_getaddrinfo for QP types other than RC (RDMA_PS_TCP, RDMA_PS_IB) and UD (RDMA_PS_UDP, RDMA_PS_IB)");
		return -1;
	}
	if (node || service || !hints || (!hints->ai_src_addr && !hints->ai_dst_addr)) {
		if (qp_type == IBV_QPT_UD)
			h.ai_socktype = SOCK_DGRAM;
		if (hints && (hints->ai_flags & RAI_NUMERICHOST))
			h.ai_flags |= AI_NUMERICHOST;
		if (passive)
			h.ai_flags |= AI_PASSIVE;
		h.ai_family = hints && hints->ai_family ? hints->ai_family : AF_INET;
		err = getaddrinfo(node, service, &h, &ai);
		if (err)
			return fail(err == EAI_SYSTEM ? errno : EADDRNOTAVAIL);
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		return fail(ENOMEM);
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_qp_type = qp_type;
	r->ai_port_space = ps;
	if (ai) {
		r->ai_family = ai->ai_family;
		if (passive)
			err = copy_addr(&r->ai_src_addr, &r->ai_src_len, ai->ai_addr, ai->ai_addrlen);
		else
			err = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
		freeaddrinfo(ai);
	} else {
		r->ai_family = hints->ai_dst_addr ? hints->ai_dst_addr->sa_family : hints->ai_src_addr->sa_family;
		err = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!err && hints && !r->ai_src_addr)
		err = copy_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
	if (err) {
		rdma_freeaddrinfo(r);
		return fail(err);
	}
	*res = r;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* rdma_create_ep makes a synchronous identifier for res: bound for a
 * passive one (whose QP attributes rdma_get_request uses), else with its
 * address and route resolved and, given qp_init_attr, a QP. */
EXPORT int rdma_create_ep(struct rdma_cm_id **idp, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	struct sn_cm_id *id;

	if (create_id(NULL, &cid, NULL, res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP, res->ai_qp_type))
		return -1;
	id = (struct sn_cm_id *)cid;
	cid->pd = pd;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cid, res->ai_src_addr))
			goto err;
		if (qp_init_attr) {
			id->has_qp_attr = 1;
			id->qp_attr = *qp_init_attr;
		}
	} else {
		if (rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000) ||
		    rdma_resolve_route(cid, 2000))
			goto err;
		if (qp_init_attr && rdma_create_qp(cid, pd, qp_init_attr))
			goto err;
	}
	*idp = cid;
	return 0;
err:
	rdma_destroy_id(cid);
	return -1;
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **idp)
{
	struct sn_cm_id *id = NULL;
	int err = snGetRequest((struct sn_cm_id *)listen, &id);

	if (err)
		return fail(err);
	if (id->has_qp_attr) {
		struct ibv_qp_init_attr a = id->qp_attr;

		if (rdma_create_qp(&id->id, id->id.pd, &a)) {
			err = errno;
			rdma_reject(&id->id, NULL, 0);
			rdma_destroy_id(&id->id);
			return fail(err);
		}
	}
	*idp = &id->id;
	return 0;
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	snMigrateID((struct sn_cm_id *)id, (struct sn_event_channel *)channel);
	id->channel = channel;
	return 0;
}

EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	return fail(snNotify((struct sn_cm_id *)id, event));
}

/* Multicast (mcast.go): the checks of librdmacm's rdma_join_multicast_ex
 * here, the join on the Go side. */
EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	struct sn_addr a;
	int err;

	if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return fail(EOPNOTSUPP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED || !attr->addr)
		return fail(EINVAL);
	err = to_addr(attr->addr, &a);
	if (err)
		return fail(err == EAFNOSUPPORT ? EINVAL : err);
	return fail(snJoinMulticast((struct sn_cm_id *)id, &a,
				    attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context));
}

EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex attr = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = addr,
	};

	return rdma_join_multicast_ex(id, &attr, context);
}

EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct sn_addr a;

	if (!addr || to_addr(addr, &a))
		return fail(EINVAL);
	return fail(snLeaveMulticast((struct sn_cm_id *)id, &a));
}

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq;

	if (!pd)
		pd = id->pd;
	if (!pd)
		return fail(EINVAL);
	srq = ibv_create_srq(pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	(void)id;
	(void)attr;
	sn_unsupported("rdma_create_srq_ex");
	return -1;
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq) {
		ibv_destroy_srq(id->srq);
		id->srq = NULL;
	}
}

EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	sn_unsupported("rdma_set_local_ece");
	return -1;
}

EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	sn_unsupported("rdma_get_remote_ece");
	return -1;
}

EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	(void)id;
	(void)private_data;
	(void)private_data_len;
	sn_unsupported("rdma_reject_ece");
	return -1;
}
