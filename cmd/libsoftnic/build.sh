#!/bin/sh
# Builds libsoftnic into DIR (default: lib/softnic under the repository):
# DIR/libibverbs.so.1, the library, and librdmacm.so.1, libmlx5.so.1 and
# libefa.so.1, links to it. It needs the Go toolchain, a C compiler and
# the headers of Debian's libibverbs-dev and librdmacm-dev.
#
#	cmd/libsoftnic/build.sh /tmp/softnic-lib
#	LD_LIBRARY_PATH=/tmp/softnic-lib SOFTNIC_SOCKET=/tmp/softnic.sock ibv_devinfo
set -eu
src=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$src/../../lib/softnic}
mkdir -p "$dir"
cd "$src"
go build -tags libsoftnic -buildmode=c-shared \
	-ldflags "-extldflags '-Wl,-soname,libibverbs.so.1 -Wl,--version-script=$src/libsoftnic.map'" \
	-o "$dir/libibverbs.so.1" .
rm -f "$dir/libibverbs.so.h"
for name in librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
	ln -sf libibverbs.so.1 "$dir/$name"
done
