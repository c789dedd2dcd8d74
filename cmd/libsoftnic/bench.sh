#!/bin/sh
# Measures Debian's perftest through libsoftnic against the same operations
# through softnic's Go API, on one softnic daemon on loopback, in the same
# run, alternating, ROUNDS rounds (default 3):
#
#	ib_write_bw -F -s 65536   against  softnic perftest write_bw -s 65536
#	ib_read_bw -F -s 65536    against  softnic perftest read_bw -s 65536
#	ib_write_lat -F -s 8      against  softnic bench --attach: write_8_poll
#
# Both sides of each perftest test are attached to the daemon: the
# library's through softnic run, the Go ones because SOFTNIC_SOCKET names
# the daemon (softnic perftest's device then attaches, nic.Config). Each
# tool's default iterations: 5000 for bandwidth, 1000 for latency. The
# Go side's latency is softnic bench's, whose initiator is attached to the
# daemon and whose target is an embedded device: softnic perftest's
# write_lat cannot run attached (it learns of the peer's WRITEs from the
# device's packet trace, which an attached device does not have), and
# ib_write_lat's figure (t_typical) is half the round trip of a ping-pong
# of two WRITEs, while write_8_poll is the round trip of one WRITE and
# its ACK, so the ratio printed is 2 × t_typical over write_8_poll.
#
# Then it runs tests/testdata/libsoftnic_regcost.c, the cost of
# ibv_reg_mr and ibv_dereg_mr of malloc'd memory (the pages move onto a
# memfd and back) beside a memcpy of the same size.
#
# It prints each run's figure (BW average in MB/s, t_typical or the
# median round trip in µs) with the packets the daemon resent during it,
# then the medians and the ratios libsoftnic/Go, and the machine's load
# (uptime).
#
# Usage, from the repository's root (needs perftest, gcc, libibverbs-dev,
# librdmacm-dev):
#
#	cmd/libsoftnic/bench.sh [DIR]
#
# DIR (default: a temporary directory) receives the softnic binary, the
# library and the daemon's control socket. The daemon runs with softnic
# serve's defaults, which sleep between operations, for both sides;
# SERVE_FLAGS adds flags to it (SERVE_FLAGS=--busy-poll=50us), for both
# sides too.
set -eu
rounds=${ROUNDS:-3}
dir=${1:-$(mktemp -d /tmp/libsoftnic-bench.XXXXXX)}
mkdir -p "$dir"
go build -o "$dir/softnic" ./cmd/softnic
cmd/libsoftnic/build.sh "$dir/lib"
sn=$dir/softnic
ctl=$dir/ctl.sock
port=$((47000 + $$ % 1000))
oob=$((18600 + $$ % 1000))

# shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
"$sn" serve --listen "127.0.0.1:$port" --control "$ctl" ${SERVE_FLAGS:-} >"$dir/serve.out" 2>"$dir/serve.err" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null' EXIT INT TERM
i=0
until [ -S "$ctl" ] && "$sn" info --control "$ctl" >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "the daemon did not start:" >&2; cat "$dir/serve.err" >&2; exit 1; }
	sleep 0.1
done

resent() { "$sn" stat --control "$ctl" --json | sed 's/.*"retransmitted_pkts":\([0-9]*\).*/\1/'; }

# pair SERVER... :: CLIENT...: runs the server, then the client, and
# prints the client's result row.
pair() {
	server=""
	while [ "$1" != "::" ]; do server="$server $1"; shift; done
	shift
	$server >"$dir/server.out" 2>&1 &
	spid=$!
	sleep 0.5 # the server listens on its TCP port first
	if ! timeout 120 "$@" >"$dir/client.out" 2>&1; then
		echo "failed: $*" >&2
		cat "$dir/client.out" "$dir/server.out" >&2
		kill $spid 2>/dev/null
		exit 1
	fi
	wait $spid
	grep -E '^ [0-9]+ +[0-9]+ ' "$dir/client.out"
}

lib="$sn run --control $ctl --lib $dir/lib --"
gop="env SOFTNIC_SOCKET=$ctl $sn perftest"
results=$dir/results
: >"$results"
# run NAME STACK COLUMN SERVER... :: CLIENT...: one measurement, recorded.
run() {
	name=$1 stack=$2 col=$3
	shift 3
	before=$(resent)
	row=$(pair "$@")
	value=$(echo "$row" | awk -v c="$col" '{print $c}')
	echo "$name $stack $value $(($(resent) - before))" | tee -a "$results"
}
echo "test stack figure resent_pkts"
r=1
while [ $r -le "$rounds" ]; do
	for stack in lib go; do
		# Alternate which stack goes first in each round.
		[ $((r % 2)) -eq 1 ] || stack=$([ $stack = lib ] && echo go || echo lib)
		if [ $stack = lib ]; then
			run write_bw lib 4 $lib ib_write_bw -F -s 65536 -p $oob :: $lib ib_write_bw -F -s 65536 -p $oob 127.0.0.1
			run read_bw lib 4 $lib ib_read_bw -F -s 65536 -p $oob :: $lib ib_read_bw -F -s 65536 -p $oob 127.0.0.1
			run write_lat lib 5 $lib ib_write_lat -F -s 8 -p $oob :: $lib ib_write_lat -F -s 8 -p $oob 127.0.0.1
		else
			g="--port $port --oob-port $oob"
			run write_bw go 4 $gop write_bw -s 65536 $g :: $gop write_bw -s 65536 $g 127.0.0.1
			run read_bw go 4 $gop read_bw -s 65536 $g :: $gop read_bw -s 65536 $g 127.0.0.1
			before=$(resent)
			rtt=$("$sn" bench --attach "$ctl" --only raw_udp_ping_pong --ops 2000 --json |
				sed 's/.*"write_8_poll":{"median_us":\([0-9.]*\).*/\1/')
			echo "write_lat go $rtt $(($(resent) - before))" | tee -a "$results"
		fi
	done
	r=$((r + 1))
done

echo
echo "medians of $rounds rounds (bandwidth: BW average MB/s; latency: t_typical, and the Go side's round trip, us):"
for t in write_bw read_bw write_lat; do
	med() { awk -v t="$t" -v s="$1" '$1 == t && $2 == s {print $3}' "$results" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
	l=$(med lib)
	g=$(med go)
	k=1
	[ $t != write_lat ] || k=2 # half a round trip against a whole one
	echo "$t libsoftnic=$l go=$g libsoftnic/go=$(awk -v l="$l" -v g="$g" -v k=$k 'BEGIN {printf "%.2f", k * l / g}')"
done
echo
gcc -O2 -o "$dir/regcost" tests/testdata/libsoftnic_regcost.c -libverbs
$lib "$dir/regcost"
echo "daemon: softnic serve ${SERVE_FLAGS:-(defaults)}; load: $(uptime)"
