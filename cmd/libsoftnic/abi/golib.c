/*
 * Loading the Go side. The Go library is loaded at the first call that
 * needs it, not with the program: a Go runtime does not survive fork(),
 * so a program that forks before it opens a device (qperf's server, which
 * forks for each client; libfabric's fi_rmabw, which forks its target)
 * has its child start a runtime of its own. A child forked after the load
 * cannot call into Go: the runtime's threads are not copied into it, and a
 * call would wait for them for ever.
 */
#define _GNU_SOURCE
#define SN_GO_LOADER
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "softnic.h"
#include "golib.h"

struct sn_go sn_go;
int sn_go_loaded;

static pthread_once_t sn_go_once = PTHREAD_ONCE_INIT;
static char sn_go_why[PATH_MAX + 256]; /* why it could not be loaded */
static volatile int sn_forked_loaded;

/* The functions of the C entry points the Go side calls (struct sn_abi). */
static const struct sn_abi sn_abi_calls = {
	.new_child = sn_new_child,
	.set_addr = sn_set_addr,
	.destroy_id = rdma_destroy_id,
};

/* sn_go_path writes the path of libsoftnic-go.so, which build.sh puts
 * next to this library, into path. */
static int sn_go_path(char *path, size_t size)
{
	Dl_info self;
	const char *slash;

	if (!dladdr((void *)sn_go_path, &self) || !self.dli_fname || !(slash = strrchr(self.dli_fname, '/')))
		return snprintf(path, size, "libsoftnic-go.so") >= (int)size;
	return snprintf(path, size, "%.*s/libsoftnic-go.so", (int)(slash - self.dli_fname), self.dli_fname) >= (int)size;
}

static void sn_go_load(void)
{
	char path[PATH_MAX];
	sigset_t all, mask;
	void *lib;

	if (sn_go_path(path, sizeof(path))) {
		snprintf(sn_go_why, sizeof(sn_go_why), "the path of libsoftnic-go.so is too long");
		return;
	}
	/* The Go runtime's threads start from this one, with its signal mask:
	 * all signals blocked, they leave the program's signals (qperf's
	 * SIGALRM, which must interrupt its ibv_get_cq_event) to the
	 * program's threads. The runtime unblocks those it needs itself. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &mask);
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	pthread_sigmask(SIG_SETMASK, &mask, NULL);
	if (!lib) {
		snprintf(sn_go_why, sizeof(sn_go_why), "%s", dlerror());
		return;
	}
#define SN_GO_LOOKUP(f)                                                                      \
	if (!(sn_go.f = (__typeof__(sn_go.f))dlsym(lib, #f))) {                                \
		snprintf(sn_go_why, sizeof(sn_go_why), "%s has no %s: not this library's", path, #f); \
		return;                                                                        \
	}
	SN_GO_FUNCS(SN_GO_LOOKUP)
#undef SN_GO_LOOKUP
	sn_go.snLinkABI((struct sn_abi *)&sn_abi_calls);
	__atomic_store_n(&sn_go_loaded, 1, __ATOMIC_RELEASE);
}

struct sn_go *sn_go_need(void)
{
	pthread_once(&sn_go_once, sn_go_load);
	if (!sn_go_loaded) {
		fprintf(stderr, "softnic: cannot load the Go side of libsoftnic: %s\n", sn_go_why);
		abort();
	}
	return &sn_go;
}

static void sn_on_fork(void)
{
	sn_forked_loaded = __atomic_load_n(&sn_go_loaded, __ATOMIC_ACQUIRE);
}

__attribute__((constructor)) static void sn_watch_fork(void)
{
	pthread_atfork(NULL, NULL, sn_on_fork);
}

int sn_go_callable(void)
{
	return __atomic_load_n(&sn_go_loaded, __ATOMIC_ACQUIRE) && !sn_forked_loaded;
}

int sn_refuse(const char *call)
{
	static int said_forked, said_load;

	if (sn_forked_loaded) {
		if (!said_forked++)
			fprintf(stderr, "softnic: %s: not supported in a child fork() made of a process that had used "
					"libsoftnic (its Go runtime does not survive fork); exec a program in the child, "
					"or fork before the first call\n",
				call);
		errno = EOPNOTSUPP;
		return 1;
	}
	pthread_once(&sn_go_once, sn_go_load);
	if (sn_go_loaded)
		return 0;
	if (!said_load++)
		fprintf(stderr, "softnic: %s: cannot load the Go side of libsoftnic: %s\n", call, sn_go_why);
	errno = ELIBACC;
	return 1;
}
