/*
 * The calls softnic does not support: each names itself once on stderr and
 * fails as rdma-core fails a call the device cannot do (EOPNOTSUPP, or
 * NULL with errno set). Among them are the entry points of libmlx5 and
 * libefa that Debian's perftest links against: this library stands in
 * for those two as well, so that none of rdma-core's libraries is loaded.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>

#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>
#include <rdma/rsocket.h>

#include "softnic.h"
#include "golib.h"

#define EXPORT __attribute__((visibility("default")))

void sn_unsupported(const char *name)
{
	snUnsupported((char *)name);
	errno = EOPNOTSUPP;
}

/* NULL with errno EOPNOTSUPP. */
#define NULL_STUB(ret, name, ...)        \
	EXPORT ret name(__VA_ARGS__)      \
	{                                 \
		sn_unsupported(#name);    \
		return NULL;              \
	}

/* EOPNOTSUPP as the return value, as the verbs that return an errno. */
#define ERRNO_STUB(ret, name, ...)       \
	EXPORT ret name(__VA_ARGS__)      \
	{                                 \
		sn_unsupported(#name);    \
		return EOPNOTSUPP;        \
	}

/* -1 with errno EOPNOTSUPP, as the calls that set errno. */
#define MINUS1_STUB(ret, name, ...)      \
	EXPORT ret name(__VA_ARGS__)      \
	{                                 \
		sn_unsupported(#name);    \
		return -1;                \
	}

#pragma GCC diagnostic ignored "-Wunused-parameter"

ERRNO_STUB(int, ibv_resolve_eth_l2_from_gid, struct ibv_context *context, struct ibv_ah_attr *attr,
	   uint8_t eth_mac[6], uint16_t *vid)
NULL_STUB(struct ibv_context *, ibv_import_device, int cmd_fd)
NULL_STUB(struct ibv_pd *, ibv_import_pd, struct ibv_context *context, uint32_t pd_handle)
NULL_STUB(struct ibv_mr *, ibv_import_mr, struct ibv_pd *pd, uint32_t mr_handle)
NULL_STUB(struct ibv_dm *, ibv_import_dm, struct ibv_context *context, uint32_t dm_handle)
ERRNO_STUB(int, ibv_query_ece, struct ibv_qp *qp, struct ibv_ece *ece)
ERRNO_STUB(int, ibv_set_ece, struct ibv_qp *qp, struct ibv_ece *ece)
NULL_STUB(struct ibv_mr *, ibv_reg_dmabuf_mr, struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
	  int fd, int access)

EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { sn_unsupported("ibv_unimport_pd"); }
EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { sn_unsupported("ibv_unimport_mr"); }
EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { sn_unsupported("ibv_unimport_dm"); }

/* libmlx5 */
NULL_STUB(struct ibv_qp *, mlx5dv_create_qp, struct ibv_context *context, struct ibv_qp_init_attr_ex *qp_attr,
	  struct mlx5dv_qp_init_attr *mlx5_qp_attr)
NULL_STUB(struct ibv_context *, mlx5dv_open_device, struct ibv_device *device, struct mlx5dv_context_attr *attr)
ERRNO_STUB(int, mlx5dv_devx_general_cmd, struct ibv_context *context, const void *in, size_t inlen, void *out,
	   size_t outlen)
NULL_STUB(struct mlx5dv_qp_ex *, mlx5dv_qp_ex_from_ibv_qp_ex, struct ibv_qp_ex *qp)
NULL_STUB(struct mlx5dv_mkey *, mlx5dv_create_mkey, struct mlx5dv_mkey_init_attr *mkey_init_attr)
ERRNO_STUB(int, mlx5dv_destroy_mkey, struct mlx5dv_mkey *mkey)
ERRNO_STUB(int, mlx5dv_crypto_login, struct ibv_context *context, struct mlx5dv_crypto_login_attr *login_attr)
NULL_STUB(struct mlx5dv_dek *, mlx5dv_dek_create, struct ibv_context *context, struct mlx5dv_dek_init_attr *init_attr)
ERRNO_STUB(int, mlx5dv_dek_destroy, struct mlx5dv_dek *dek)
EXPORT bool mlx5dv_is_supported(struct ibv_device *device) { return false; }

/* libefa */
ERRNO_STUB(int, efadv_query_device, struct ibv_context *ibvctx, struct efadv_device_attr *attr, uint32_t inlen)
NULL_STUB(struct ibv_qp *, efadv_create_qp_ex, struct ibv_context *ibvctx, struct ibv_qp_init_attr_ex *attr_ex,
	  struct efadv_qp_init_attr *efa_attr, uint32_t inlen)
ERRNO_STUB(int, efadv_query_ah, struct ibv_ah *ibvah, struct efadv_ah_attr *attr, uint32_t inlen)
NULL_STUB(struct ibv_cq_ex *, efadv_create_cq, struct ibv_context *ibvctx, struct ibv_cq_init_attr_ex *attr_ex,
	  struct efadv_cq_init_attr *efa_attr, uint32_t inlen)
NULL_STUB(struct efadv_cq *, efadv_cq_from_ibv_cq_ex, struct ibv_cq_ex *ibvcqx)

/* rsockets: softnic has none. rpoll and rselect on ordinary descriptors
 * are poll and select. */
MINUS1_STUB(int, rsocket, int domain, int type, int protocol)
MINUS1_STUB(int, rbind, int socket, const struct sockaddr *addr, socklen_t addrlen)
MINUS1_STUB(int, rlisten, int socket, int backlog)
MINUS1_STUB(int, raccept, int socket, struct sockaddr *addr, socklen_t *addrlen)
MINUS1_STUB(int, rconnect, int socket, const struct sockaddr *addr, socklen_t addrlen)
MINUS1_STUB(int, rshutdown, int socket, int how)
MINUS1_STUB(int, rclose, int socket)
MINUS1_STUB(ssize_t, rrecv, int socket, void *buf, size_t len, int flags)
MINUS1_STUB(ssize_t, rrecvfrom, int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
	    socklen_t *addrlen)
MINUS1_STUB(ssize_t, rrecvmsg, int socket, struct msghdr *msg, int flags)
MINUS1_STUB(ssize_t, rsend, int socket, const void *buf, size_t len, int flags)
MINUS1_STUB(ssize_t, rsendto, int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
	    socklen_t addrlen)
MINUS1_STUB(ssize_t, rsendmsg, int socket, const struct msghdr *msg, int flags)
MINUS1_STUB(ssize_t, rread, int socket, void *buf, size_t count)
MINUS1_STUB(ssize_t, rreadv, int socket, const struct iovec *iov, int iovcnt)
MINUS1_STUB(ssize_t, rwrite, int socket, const void *buf, size_t count)
MINUS1_STUB(ssize_t, rwritev, int socket, const struct iovec *iov, int iovcnt)
MINUS1_STUB(int, rgetpeername, int socket, struct sockaddr *addr, socklen_t *addrlen)
MINUS1_STUB(int, rgetsockname, int socket, struct sockaddr *addr, socklen_t *addrlen)
MINUS1_STUB(int, rsetsockopt, int socket, int level, int optname, const void *optval, socklen_t optlen)
MINUS1_STUB(int, rgetsockopt, int socket, int level, int optname, void *optval, socklen_t *optlen)
MINUS1_STUB(off_t, riomap, int socket, void *buf, size_t len, int prot, int flags, off_t offset)
MINUS1_STUB(int, riounmap, int socket, void *buf, size_t len)

EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	sn_unsupported("riowrite");
	return 0;
}

EXPORT int rfcntl(int socket, int cmd, ...)
{
	sn_unsupported("rfcntl");
	return -1;
}

EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}
