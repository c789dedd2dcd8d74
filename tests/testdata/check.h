/*
 * The checks of the C test programs here: each CHECK prints one line,
 * "ok: ..." or "FAIL: ..." with errno, and counts the failures, which the
 * program prints last ("N failed") and exits non-zero for.
 */
#ifndef CHECK_H
#define CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (cond) {                                                \
			printf("ok: " __VA_ARGS__);                        \
		} else {                                                   \
			printf("FAIL: " __VA_ARGS__);                      \
			printf(" (errno %d: %s)", errno, strerror(errno)); \
			failures++;                                        \
		}                                                          \
		printf("\n");                                              \
		fflush(stdout);                                            \
	} while (0)

#endif
