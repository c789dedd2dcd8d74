#!/bin/sh
# Measures Debian's perftest through libsoftnic against the same operations
# through softnic's Go API, on one softnic daemon on loopback, in the same
# run, alternating, ROUNDS rounds (default 3):
#
#	write_bw       ib_write_bw -F -s 65536 -n 5000         against  softnic perftest write_bw -s 65536 -n 5000 --poll
#	write_bw_q100  ib_write_bw -F -Q 100 -s 65536 -n 5000  against  softnic perftest write_bw -Q 100 -s 65536 -n 5000
#	read_bw        ib_read_bw -F -s 65536 -n 5000          against  softnic perftest read_bw -s 65536 -n 5000 --poll
#	read_bw_q100   ib_read_bw -F -Q 100 -s 65536 -n 5000   against  softnic perftest read_bw -Q 100 -s 65536 -n 5000
#	write_lat      ib_write_lat -F -s 8 -n 1000            against  softnic perftest write_lat -s 8 -n 1000
#
# Both sides of each test are attached to the daemon: the library's
# through softnic run, the Go ones because SOFTNIC_SOCKET names the daemon
# (softnic perftest's device then attaches, nic.Config). The iterations
# are given: ib_read_bw's default is 1000, the other tools' 5000 for
# bandwidth and 1000 for latency, as softnic perftest's.
#
# How the bandwidth tests' clients wait. perftest asks for a completion
# every 100 messages, but for every message when they are larger than
# 8 KiB, unless -Q says otherwise: so write_bw and read_bw compare clients
# that each take a completion per message and poll their CQ in a loop
# (ib_write_bw, ib_read_bw; softnic perftest --poll), each empty poll
# giving up the CPU to the daemon (libsoftnic's ibv_poll_cq; an attached
# device's CQ.Poll). The _q100 rows compare clients that take a completion
# every 100 messages, as softnic perftest did by default before 26
# November 2026: ib_write_bw -Q 100 polls (libsoftnic's ibv_poll_cq
# naps 20 us per empty poll once the thread has waited 1 ms), softnic
# perftest -Q 100 sleeps in CQ.Wait.
#
# The latency test is the same ping-pong on both sides, compared in the
# same column (t_typical, half a round trip): each side WRITEs 8 bytes into
# the peer's buffer, then spins until the peer's WRITE has landed in its
# own, ib_write_lat polling the buffer's last byte, softnic perftest
# loading the word that holds it atomically (nic.MR.Word; the daemon
# writes it through the memory it shares with each program), and both poll
# the CQ in a loop for their WRITE's completion, each poll that finds
# nothing giving up the CPU to the daemon.
#
# Beside it, for continuity with the figures before 26 November 2026, it
# prints softnic bench --attach's write_8_poll (write_rtt_bench): the
# round trip of one WRITE from an attached initiator and its ACK from an
# embedded target inside the bench process, which is not the same
# operation (one WRITE, not two; one side attached), so it gets no ratio.
#
# Then it runs tests/testdata/libsoftnic_regcost.c, the cost of
# ibv_reg_mr and ibv_dereg_mr of malloc'd memory (the pages move onto a
# memfd and back) beside a memcpy of the same size, of ibv_alloc_pd (one
# call to the daemon), and of a registration above 20,000 mappings.
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
			run write_bw lib 4 $lib ib_write_bw -F -s 65536 -n 5000 -p $oob :: $lib ib_write_bw -F -s 65536 -n 5000 -p $oob 127.0.0.1
			run write_bw_q100 lib 4 $lib ib_write_bw -F -Q 100 -s 65536 -n 5000 -p $oob :: $lib ib_write_bw -F -Q 100 -s 65536 -n 5000 -p $oob 127.0.0.1
			run read_bw lib 4 $lib ib_read_bw -F -s 65536 -n 5000 -p $oob :: $lib ib_read_bw -F -s 65536 -n 5000 -p $oob 127.0.0.1
			run read_bw_q100 lib 4 $lib ib_read_bw -F -Q 100 -s 65536 -n 5000 -p $oob :: $lib ib_read_bw -F -Q 100 -s 65536 -n 5000 -p $oob 127.0.0.1
			run write_lat lib 5 $lib ib_write_lat -F -s 8 -n 1000 -p $oob :: $lib ib_write_lat -F -s 8 -n 1000 -p $oob 127.0.0.1
		else
			g="--port $port --oob-port $oob"
			run write_bw go 4 $gop write_bw -s 65536 -n 5000 --poll $g :: $gop write_bw -s 65536 -n 5000 --poll $g 127.0.0.1
			run write_bw_q100 go 4 $gop write_bw -Q 100 -s 65536 -n 5000 $g :: $gop write_bw -Q 100 -s 65536 -n 5000 $g 127.0.0.1
			run read_bw go 4 $gop read_bw -s 65536 -n 5000 --poll $g :: $gop read_bw -s 65536 -n 5000 --poll $g 127.0.0.1
			run read_bw_q100 go 4 $gop read_bw -Q 100 -s 65536 -n 5000 $g :: $gop read_bw -Q 100 -s 65536 -n 5000 $g 127.0.0.1
			run write_lat go 5 $gop write_lat -s 8 -n 1000 $g :: $gop write_lat -s 8 -n 1000 $g 127.0.0.1
			before=$(resent)
			rtt=$("$sn" bench --attach "$ctl" --only raw_udp_ping_pong --ops 2000 --json |
				sed 's/.*"write_8_poll":{"median_us":\([0-9.]*\).*/\1/')
			echo "write_rtt_bench go $rtt $(($(resent) - before))" | tee -a "$results"
		fi
	done
	r=$((r + 1))
done

echo
med() { awk -v t="$1" -v s="$2" '$1 == t && $2 == s {print $3}' "$results" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "medians of $rounds rounds (bandwidth: BW average MB/s; latency: t_typical us):"
for t in write_bw write_bw_q100 read_bw read_bw_q100 write_lat; do
	l=$(med $t lib)
	g=$(med $t go)
	echo "$t libsoftnic=$l go=$g libsoftnic/go=$(awk -v l="$l" -v g="$g" 'BEGIN {printf "%.2f", l / g}')"
done
echo "write_rtt_bench (softnic bench --attach write_8_poll, round trip us, not the same operation) go=$(med write_rtt_bench go)"
echo
gcc -O2 -o "$dir/regcost" tests/testdata/libsoftnic_regcost.c -libverbs
$lib "$dir/regcost"
echo "daemon: softnic serve ${SERVE_FLAGS:-(defaults)}; load: $(uptime)"
