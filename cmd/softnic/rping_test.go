package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRpingLoopback: a softnic rping client and server, each verifying
// the data, on loopback.
func TestRpingLoopback(t *testing.T) {
	tests := []struct {
		name  string
		size  string
		count int
		mtu   string
	}{
		{"rping's default size", "64", 5, "1024"},
		{"a READ and WRITE of many packets", "9000", 3, "1024"},
		{"largest", "65535", 2, "4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			udp, tcp := freePorts(t) // tcp: a port for rdma_cm, likely free too
			common := []string{"-S", tt.size, "-v", "-p", fmt.Sprint(tcp), "--udp-port", fmt.Sprint(udp), "--mtu", tt.mtu, "--counters"}
			srv, cli := runPair(t,
				append([]string{"rping", "-s", "-a", "127.0.0.1"}, common...),
				append([]string{"rping", "-c", "-a", "127.0.0.1", "-I", "127.0.0.2", "-C", fmt.Sprint(tt.count)}, common...),
				udpBound(udp))
			if n := strings.Count(srv, "server ping data: rdma-ping-"); n != tt.count {
				t.Errorf("the server shows %d pings, want %d:\n%s", n, tt.count, srv)
			}
			if n := strings.Count(cli, "\nping data: rdma-ping-") + strings.Count(cli[:min(len(cli), 11)], "ping data: "); n != tt.count {
				t.Errorf("the client shows %d pings, want %d:\n%s", n, tt.count, cli)
			}
			cs, cc := counters(t, srv), counters(t, cli)
			if cs["cm_established"] != 1 || cc["cm_established"] != 1 || cs["cm_disconnected"] != 1 {
				t.Errorf("server CM counters %v, client %v: want one connection, ended", cs, cc)
			}
			for _, name := range []string{"retransmitted_pkts", "bad_icrc", "rcvd_rnr_err"} {
				if cs[name]+cc[name] != 0 {
					t.Errorf("%s: server %d, client %d", name, cs[name], cc[name])
				}
			}
		})
	}
}

func TestRpingBadUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no side", []string{"-a", "127.0.0.1"}, "give either -s (server) or -c (client)"},
		{"both sides", []string{"-s", "-c", "-a", "127.0.0.1"}, "give either -s (server) or -c (client)"},
		{"no address", []string{"-c"}, "missing -a ADDR"},
		{"server source", []string{"-s", "-a", "127.0.0.1", "-I", "127.0.0.2"}, "-I is for the client"},
		{"negative count", []string{"-c", "-a", "127.0.0.1", "-C", "-1"}, "-C -1: want a count"},
		{"small", []string{"-c", "-a", "127.0.0.1", "-S", "25"}, "-S 25: want 26 to 65535 bytes"},
		{"large", []string{"-c", "-a", "127.0.0.1", "-S", "65536"}, "-S 65536: want 26 to 65535 bytes"},
		{"port", []string{"-c", "-a", "127.0.0.1", "-p", "0"}, "-p 0, --udp-port 4791: want ports"},
		{"mtu", []string{"-c", "-a", "127.0.0.1", "--mtu", "9000"}, "--mtu 9000: want 256"},
		{"argument", []string{"-c", "-a", "127.0.0.1", "now"}, "too many arguments: now"},
		{"server name", []string{"-s", "-a", "localhost"}, `-a "localhost": the server listens on an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(append([]string{"rping"}, tt.args...)...)
			first, _, _ := strings.Cut(stderr, "\n")
			if code != 2 || stdout != "" || !strings.HasPrefix(first, "softnic rping: ") || !strings.Contains(first, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, first, tt.stderr)
			}
		})
	}
}

// TestRpingForever: without -C the client pings until interrupted, which
// ends both sides with status 0, as rping's does.
func TestRpingForever(t *testing.T) {
	udp, cm := freePorts(t)
	common := []string{"-v", "-p", fmt.Sprint(cm), "--udp-port", fmt.Sprint(udp), "--mtu", "1024"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var srvOut, cliOut, errs syncBuffer
	srvExit, cliExit := make(chan int, 1), make(chan int, 1)
	go func() {
		srvExit <- runContext(ctx, append([]string{"rping", "-s", "-a", "127.0.0.1"}, common...), &srvOut, &errs)
	}()
	if !waitUntil(ctx, udpBound(udp)) {
		t.Fatal("the server does not listen")
	}
	cliCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	client := append([]string{"rping", "-c", "-a", "127.0.0.1", "-I", "127.0.0.2"}, common...)
	var cliErr *syncBuffer
	for retries := 0; ; retries++ {
		cliErr = new(syncBuffer)
		go func() { cliExit <- runContext(cliCtx, client, &cliOut, cliErr) }()
		if !waitUntil(ctx, func() bool { return strings.Count(cliOut.String(), "ping data:") >= 3 || len(cliExit) > 0 }) {
			t.Fatalf("no pings:\n%s%s", errs.String(), cliErr.String())
		}
		if len(cliExit) == 0 || !notListening(cliErr.String()) || retries == 100 {
			break
		}
		<-cliExit // the server was not listening yet: as runPair, try again
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Count(cliOut.String(), "ping data:") < 3 {
		t.Fatalf("the client exits %d before 3 pings:\n%s%s", <-cliExit, errs.String(), cliErr.String())
	}
	interrupt()
	if code := <-cliExit; code != 0 {
		t.Fatalf("the interrupted client exits %d:\n%s%s", code, errs.String(), cliErr.String())
	}
	if code := <-srvExit; code != 0 {
		t.Fatalf("the server exits %d after the client left:\n%s%s", code, srvOut.String(), errs.String())
	}
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}
