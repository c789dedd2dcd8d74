package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildSoftnic builds the softnic command into a temporary directory.
func buildSoftnic(t *testing.T) string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build softnic with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "softnic")
	out, err := exec.Command(gocmd, "build", "-o", bin, "github.com/softnic/softnic/cmd/softnic").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer collects a process's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startUntilCleanup starts cmd, which the test's cleanup kills and waits
// for. It returns cmd's exit, which a reader that takes it before the
// cleanup must put back.
func startUntilCleanup(t *testing.T, cmd *exec.Cmd) chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	return exited
}

// cliReady is the JSON line softnic serve prints when it is ready.
type cliReady struct {
	Listen  string `json:"listen"`
	Control string `json:"control"`
	CMPort  uint16 `json:"cm_port"`
	Regions []struct {
		Name   string `json:"name"`
		Addr   uint64 `json:"addr"`
		Len    int    `json:"len"`
		RKey   uint32 `json:"rkey"`
		Access string `json:"access"`
	} `json:"regions"`
}

// softnicCmd runs the binary with args and returns its exit status, stdout
// and stderr; it fails the test if the command does not end within a
// minute.
func softnicCmd(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("softnic %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	return 0, "", ""
}

// TestCLI is the walk-through of the README, with the real binary: softnic
// serve on a free loopback port with a capture, WRITE → READ → FETCH_ADD →
// COMPARE_SWAP through the one-shot commands, stat, a bad rkey, SIGTERM,
// and softnic decode of the capture.
func TestCLI(t *testing.T) {
	bin := buildSoftnic(t)
	dir := t.TempDir()
	pcap, control := filepath.Join(dir, "serve.pcap"), filepath.Join(dir, "ctl.sock")

	serve := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--region", "mem:64k:rwa",
		"--pcap", pcap, "--control", control, "--log-level", "debug")
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var serveErr lockedBuffer
	serve.Stderr = &serveErr
	exited := startUntilCleanup(t, serve)

	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- l
		io.Copy(io.Discard, stdout) // nothing more is expected; keep the pipe drained
	}()
	var ready cliReady
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &ready); err != nil {
			t.Fatalf("ready line %q: %v\nstderr:\n%s", l, err, serveErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no ready line; stderr:\n%s", serveErr.String())
	}
	if ready.Control != control || len(ready.Regions) != 1 || ready.Regions[0].Name != "mem" ||
		ready.Regions[0].Len != 64<<10 || ready.Regions[0].Access != "rwa" || !strings.HasPrefix(ready.Listen, "127.0.0.1:") {
		t.Fatalf("ready line %+v", ready)
	}
	mem := ready.Regions[0]
	at := func(off uint64) string { return fmt.Sprintf("%#x", mem.Addr+off) }
	op := func(cmd string, args ...string) (int, string, string) {
		return softnicCmd(t, bin, append([]string{cmd, "--peer", ready.Listen, "--cm-port", fmt.Sprint(ready.CMPort),
			"--rkey", fmt.Sprint(mem.RKey), "--timeout", "20s"}, args...)...)
	}

	steps := []struct {
		name, cmd string
		args      []string
		stdout    string
	}{
		{"write", "write", []string{"--addr", at(64), "--data", "RDMA from the command line"},
			fmt.Sprintf("wrote 26 bytes at %s (rkey %#x) on %s\n", at(64), mem.RKey, ready.Listen)},
		{"read", "read", []string{"--addr", at(64), "--len", "26"}, "RDMA from the command line"},
		{"fadd", "fadd", []string{"--addr", at(4096), "--add", "1000"}, "0\n"},
		{"fadd again", "fadd", []string{"--addr", at(4096), "--add", "234"}, "1000\n"},
		{"cswap", "cswap", []string{"--addr", at(4096), "--compare", "1234", "--swap", "0xfeedface"}, "1234\n"},
		{"read the word", "read", []string{"--addr", at(4096), "--len", "8"}, string(binary.NativeEndian.AppendUint64(nil, 0xfeedface))},
	}
	for _, s := range steps {
		code, out, errOut := op(s.cmd, s.args...)
		if code != 0 || out != s.stdout || errOut != "" {
			t.Fatalf("%s: exit status %d, stdout %q, stderr %q; want 0 and %q", s.name, code, out, errOut, s.stdout)
		}
	}

	// A bad rkey: the completion status, explained, and exit status 1.
	bad := mem.RKey + 0x10000
	code, out, errOut := op("read", "--rkey", fmt.Sprint(bad), "--addr", at(0), "--len", "8")
	want := fmt.Sprintf("softnic read: remote access error: rkey %#x is not valid for 8 bytes at %s on %s (REM_ACCESS_ERR)\n", bad, at(0), ready.Listen)
	if code != 1 || out != "" || errOut != want {
		t.Errorf("bad rkey: exit status %d, stdout %q, stderr %q; want 1 and %q", code, out, errOut, want)
	}

	// stat counts what the daemon sent and received.
	code, out, errOut = softnicCmd(t, bin, "stat", "--control", control, "--json")
	var stat map[string]uint64
	if code != 0 || json.Unmarshal([]byte(out), &stat) != nil {
		t.Fatalf("stat --json: exit status %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Each operation took a request and its response at least; the three
	// with rkey checks saw one refusal.
	if stat["rcvd_pkts"] < uint64(len(steps)+1) || stat["sent_pkts"] < uint64(len(steps)+1) {
		t.Errorf("rcvd_pkts %d, sent_pkts %d; want at least %d each", stat["rcvd_pkts"], stat["sent_pkts"], len(steps)+1)
	}
	if stat["connections_accepted"] != uint64(len(steps)+1) || stat["connections_active"] != 0 {
		t.Errorf("connections_accepted %d active %d, want %d and 0", stat["connections_accepted"], stat["connections_active"], len(steps)+1)
	}
	if stat["remote_access_err"] != 1 || stat["rejected_unknown_key"] != 1 {
		t.Errorf("remote_access_err %d, rejected_unknown_key %d; want 1 each", stat["remote_access_err"], stat["rejected_unknown_key"])
	}

	// SIGTERM: a clean exit, the control socket removed, the capture complete.
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("softnic serve after SIGTERM: %v\nstderr:\n%s", err, serveErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("softnic serve did not exit after SIGTERM; stderr:\n%s", serveErr.String())
	}
	if _, err := os.Stat(control); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
	if log := serveErr.String(); !strings.Contains(log, "stopping") || !strings.Contains(log, "stopped") {
		t.Errorf("the daemon's log does not show the shutdown:\n%s", log)
	}

	// softnic decode reads the capture without being told the daemon's
	// port: every frame is a RoCEv2 packet the daemon counted, with a good
	// ICRC, and found by it: the daemon and the one-shot commands listen on
	// free ports, none of them 4791.
	code, out, errOut = softnicCmd(t, bin, "decode", pcap)
	if code != 0 || errOut != "" {
		t.Fatalf("decode: exit status %d, stderr %q", code, errOut)
	}
	decoded := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	m := regexp.MustCompile(`^(\d+) RoCEv2 packets? \(0 bad ICRC, 0 undecodable\), (\d+) of them found by their ICRC on other UDP ports, (\d+) other frames? skipped$`).FindStringSubmatch(decoded[len(decoded)-1])
	if m == nil {
		t.Fatalf("decode summary %q", decoded[len(decoded)-1])
	}
	roce, _ := strconv.Atoi(m[1])
	byICRC, _ := strconv.Atoi(m[2])
	other, _ := strconv.Atoi(m[3])
	if roce != len(decoded)-1 || byICRC != roce {
		t.Errorf("%d RoCEv2 packets counted, %d printed, %d found by their ICRC", roce, len(decoded)-1, byICRC)
	}
	captured := stat["sent_pkts"] + stat["rcvd_pkts"] + stat["unknown_qp"] + stat["bad_icrc"] + stat["malformed"]
	if uint64(roce) != captured || other != 0 {
		t.Errorf("decode finds %d RoCEv2 packets and %d other frames; the daemon counted %d packets sent and received", roce, other, captured)
	}
	for _, l := range decoded[:roce] {
		if !strings.HasSuffix(l, " icrc=ok") {
			t.Errorf("decoded packet without a good ICRC: %s", l)
		}
	}
	code, out, _ = softnicCmd(t, bin, "decode", "--json", pcap)
	if n := strings.Count(out, "\n"); code != 0 || n != roce {
		t.Errorf("decode --json: exit status %d, %d objects, want %d", code, n, roce)
	}

	// tshark reads the same capture, told the daemon's port (Decode As),
	// and finds the same packets, none malformed.
	t.Run("tshark", func(t *testing.T) {
		tshark, err := exec.LookPath("tshark")
		if err != nil {
			t.Skip("tshark is not on PATH; install Debian's tshark to run this check")
		}
		_, port, _ := strings.Cut(ready.Listen, ":")
		out, err := exec.Command(tshark, "-n", "-r", pcap, "-d", "udp.port=="+port+",infiniband",
			"-T", "fields", "-e", "infiniband.bth.opcode", "-e", "_ws.malformed").Output()
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		frames, ib := 0, 0
		for line := range strings.Lines(string(out)) {
			frames++
			opcode, malformed, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
			if opcode != "" {
				ib++
			}
			if malformed != "" {
				t.Errorf("tshark finds frame %d malformed: %q", frames, line)
			}
		}
		if frames != roce || ib != roce {
			t.Errorf("tshark reads %d frames, %d of them InfiniBand; softnic decode found %d RoCEv2 packets", frames, ib, roce)
		}
	})
}
