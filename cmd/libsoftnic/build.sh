#!/bin/sh
# Builds libsoftnic into DIR (default: lib/softnic under the repository):
# DIR/libibverbs.so.1, the C entry points of libibverbs and librdmacm
# (abi/), with librdmacm.so.1, libmlx5.so.1 and libefa.so.1 links to it,
# and DIR/libsoftnic-go.so, the Go side, which the entry points load at the
# first call that needs it (abi/golib.c). It needs the Go toolchain, a C
# compiler and the headers of Debian's libibverbs-dev and librdmacm-dev.
#
#	cmd/libsoftnic/build.sh /tmp/softnic-lib
#	LD_LIBRARY_PATH=/tmp/softnic-lib SOFTNIC_SOCKET=/tmp/softnic.sock ibv_devinfo
set -eu
src=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$src/../../lib/softnic}
mkdir -p "$dir"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
cd "$src"
go build -tags libsoftnic -buildmode=c-shared -o "$dir/libsoftnic-go.so" .
mv "$dir/libsoftnic-go.h" "$gen/"
# The Go side's functions, for abi/golib.h: their list, and each call
# made through the pointer the loader takes.
names=$(sed -n 's/^extern .*[ *]\(sn[A-Z][A-Za-z0-9]*\)(.*/\1/p' "$gen/libsoftnic-go.h")
{
	printf '#define SN_GO_FUNCS(X)'
	for n in $names; do printf ' \\\n\tX(%s)' "$n"; done
	printf '\n'
} >"$gen/gofuncs.h"
for n in $names; do printf '#define %s SN_GO(%s)\n' "$n" "$n"; done >"$gen/gocalls.h"
${CC:-cc} -std=gnu11 -O2 -g -fPIC -shared -Wall -Wextra -Werror -I"$src" -I"$gen" \
	-Wl,-soname,libibverbs.so.1 -Wl,--version-script="$src/abi/libsoftnic.map" -Wl,-z,defs \
	-o "$dir/libibverbs.so.1" "$src"/abi/*.c -ldl -lpthread
for name in librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
	ln -sf libibverbs.so.1 "$dir/$name"
done
