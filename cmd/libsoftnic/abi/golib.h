/*
 * The Go side's functions (libsoftnic-go.so), as the C entry points call
 * them: through pointers that golib.c takes from the Go library when the
 * first call needs it. build.sh writes the two headers this one includes
 * from the Go library's own: gofuncs.h lists the functions
 * (SN_GO_FUNCS), gocalls.h names each call (#define snX SN_GO(snX)).
 */
#ifndef SOFTNIC_GOLIB_H
#define SOFTNIC_GOLIB_H

#include "libsoftnic-go.h"
#include "gofuncs.h"

struct sn_go {
#define SN_GO_FIELD(f) __typeof__(f) *f;
	SN_GO_FUNCS(SN_GO_FIELD)
#undef SN_GO_FIELD
};

extern struct sn_go sn_go;
extern int sn_go_loaded;

/* sn_go_need loads the Go library if it is not loaded yet; a call that
 * cannot be made without it ends the program, saying why. */
struct sn_go *sn_go_need(void);

#define SN_GO(f) (__atomic_load_n(&sn_go_loaded, __ATOMIC_ACQUIRE) ? sn_go.f : sn_go_need()->f)

#ifndef SN_GO_LOADER /* golib.c, which names the functions themselves */
#include "gocalls.h"
#endif

/* sn_refuse fails call, setting errno and returning 1, where the Go side
 * cannot be called: in a child fork() made of a process that had loaded
 * it (EOPNOTSUPP), or when it cannot be loaded (ELIBACC); each reason is
 * said once on stderr. The calls that open a device or rdma_cm ask it
 * first, so that a program on a system without libsoftnic-go.so fails
 * as on one without an RDMA device. */
int sn_refuse(const char *call);

/* sn_go_callable reports whether the Go side is loaded and may be called
 * (not in a child forked after the load), for a call that can do without
 * it. */
int sn_go_callable(void);

#endif
