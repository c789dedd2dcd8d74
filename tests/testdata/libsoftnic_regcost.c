/*
 * What ibv_reg_mr and ibv_dereg_mr cost through libsoftnic, which moves
 * the registered pages onto a memfd and back (cmd/libsoftnic/doc.go): for
 * each size, the median of 9 registrations of a malloc'd, written buffer,
 * and of their deregistrations, beside a memcpy of the same size. Then
 * what a verb costs that is one round trip to the daemon and nothing
 * else: the median of 1001 ibv_alloc_pd and of their ibv_dealloc_pd. Last,
 * a 4 KiB registration of a page mapped before 20,000 other mappings,
 * which lie below it (libsoftnic looks up the mappings it moves).
 *
 * Usage: libsoftnic_regcost, through softnic run (cmd/libsoftnic/bench.sh
 * compiles and runs it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>

#define REPS 9
#define CALLS 1001

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp);
	return v[n / 2];
}

/* above_mappings prints the medians of REPS registrations of a page mapped
 * before 20,000 mappings made after it, and of their deregistrations. */
static int above_mappings(struct ibv_pd *pd)
{
	char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double reg[REPS], dereg[REPS];

	if (page == MAP_FAILED)
		return 1;
	memset(page, 1, 4096);
	for (int i = 0; i < 10000; i++) {
		/* Two pages of two protections: two mappings the kernel cannot merge. */
		char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (m == MAP_FAILED || mprotect(m, 4096, PROT_READ))
			return 1;
	}
	for (int r = 0; r < REPS; r++) {
		double t0 = now_us();
		struct ibv_mr *mr = ibv_reg_mr(pd, page, 4096, IBV_ACCESS_LOCAL_WRITE);
		double t1 = now_us();

		if (!mr || ibv_dereg_mr(mr)) {
			perror("ibv_reg_mr above 20,000 mappings");
			return 1;
		}
		reg[r] = t1 - t0;
		dereg[r] = now_us() - t1;
	}
	printf("%26s %12s\n", "reg_mr_us_above_20000_maps", "dereg_mr_us");
	printf("%26.1f %12.1f\n", median(reg, REPS), median(dereg, REPS));
	return 0;
}

/* calls prints the medians of CALLS ibv_alloc_pd and ibv_dealloc_pd. */
static int calls(struct ibv_context *ctx)
{
	static double alloc[CALLS], dealloc[CALLS];

	for (int r = 0; r < CALLS; r++) {
		double t0 = now_us();
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		double t1 = now_us();

		if (!pd) {
			perror("ibv_alloc_pd");
			return 1;
		}
		if (ibv_dealloc_pd(pd)) {
			perror("ibv_dealloc_pd");
			return 1;
		}
		alloc[r] = t1 - t0;
		dealloc[r] = now_us() - t1;
	}
	printf("%12s %12s\n", "alloc_pd_us", "dealloc_pd_us");
	printf("%12.1f %12.1f\n", median(alloc, CALLS), median(dealloc, CALLS));
	return 0;
}

int main(void)
{
	static const size_t sizes[] = { 4096, 1 << 20, 16 << 20, 64 << 20 };
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])) || !(pd = ibv_alloc_pd(ctx))) {
		perror("softnic device");
		return 2;
	}
	printf("%10s %12s %12s %12s\n", "bytes", "reg_mr_us", "dereg_mr_us", "memcpy_us");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		char *buf = malloc(n), *copy = malloc(n);
		double reg[REPS], dereg[REPS], cpy[REPS];

		if (!buf || !copy)
			return 2;
		memset(buf, 1, n);
		memset(copy, 2, n);
		for (int r = 0; r < REPS; r++) {
			double t0 = now_us();
			struct ibv_mr *mr = ibv_reg_mr(pd, buf, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
			double t1 = now_us();

			if (!mr) {
				perror("ibv_reg_mr");
				return 1;
			}
			if (ibv_dereg_mr(mr)) {
				perror("ibv_dereg_mr");
				return 1;
			}
			double t2 = now_us();

			memcpy(copy, buf, n);
			cpy[r] = now_us() - t2;
			reg[r] = t1 - t0;
			dereg[r] = t2 - t1;
		}
		printf("%10zu %12.1f %12.1f %12.1f\n", n, median(reg, REPS), median(dereg, REPS), median(cpy, REPS));
		free(buf);
		free(copy);
	}
	if (calls(ctx) || above_mappings(pd))
		return 1;
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
