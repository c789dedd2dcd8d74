//go:build libsoftnic

#include "softnic.h"

struct sn_abi sn_abi;
