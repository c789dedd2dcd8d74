package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpEveryCommand: --help of every command prints its synopsis, its
// flags and an example that starts with the command.
func TestHelpEveryCommand(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(c.name, "--help")
			if code != 0 || stderr != "" {
				t.Fatalf("exit status %d, stderr %q", code, stderr)
			}
			for _, want := range []string{"usage: softnic " + c.name, c.summary, "\nexample:\n  softnic " + c.name} {
				if !strings.Contains(stdout, want) {
					t.Errorf("help lacks %q:\n%s", want, stdout)
				}
			}
		})
	}
}

// TestBadUsage: every mistake on a command line exits with status 2 and
// says what is wrong, without doing anything.
func TestBadUsage(t *testing.T) {
	ops := []string{"--peer", "127.0.0.1:4791", "--rkey", "0x1234", "--addr", "0x1000"}
	with := func(cmd string, base []string, extra ...string) []string {
		return append(append([]string{cmd}, base...), extra...)
	}
	without := func(cmd, flag string, extra ...string) []string {
		args := []string{cmd}
		for i := 0; i < len(ops); i += 2 {
			if ops[i] != flag {
				args = append(args, ops[i], ops[i+1])
			}
		}
		return append(args, extra...)
	}
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"demo argument", []string{"demo", "now"}, "too many arguments: now"},
		{"demo mtu", []string{"demo", "--mtu", "1500"}, "--mtu 1500: want 256, 512, 1024, 2048 or 4096"},
		{"demo mtu word", []string{"demo", "--mtu", "big"}, `invalid value "big" for flag -mtu`},

		{"serve argument", []string{"serve", "now"}, "too many arguments: now"},
		{"serve listen", []string{"serve", "--listen", "localhost"}, `--listen "localhost": want an IP address and a UDP port`},
		{"serve cm-port 0", []string{"serve", "--cm-port", "0"}, "--cm-port 0: want a port from 1 to 65535"},
		{"serve cm-port big", []string{"serve", "--cm-port", "65536"}, "--cm-port 65536: want a port from 1 to 65535"},
		{"serve region", []string{"serve", "--region", "mem"}, `region "mem": want NAME:SIZE[:ACCESS]`},
		{"serve region size", []string{"serve", "--region", "mem:big"}, `region "mem:big": size "big"`},
		{"serve region access", []string{"serve", "--region", "mem:1m:rx"}, `'x' is not r, w or a`},
		{"serve region twice", []string{"serve", "--region", "mem:1m", "--region", "mem:2m"}, `region name "mem" given twice`},
		{"serve log level", []string{"serve", "--log-level", "loud"}, `--log-level "loud": want debug, info, warn or error`},
		{"serve faults", []string{"serve", "--faults", "drop=2"}, "--faults:"},
		{"serve busy-poll", []string{"serve", "--busy-poll", "2s"}, "--busy-poll 2s:"},
		{"serve doorbell-spin", []string{"serve", "--doorbell-spin", "2s"}, "--doorbell-spin 2s: want at most 1s"},
		{"serve control", []string{"serve", "--control", ""}, "--control: want a path"},
		{"serve region unit", []string{"serve", "--region", "m:1mi"}, `region "m:1mi": size "1mi": want a number of bytes`},

		{"info argument", []string{"info", "x"}, "too many arguments: x"},
		{"stat flag", []string{"stat", "--yaml"}, "flag provided but not defined: -yaml"},
		{"mr argument", []string{"mr", "x"}, "too many arguments: x"},
		{"qp flag", []string{"qp", "-v"}, "flag provided but not defined: -v"},

		{"write no peer", without("write", "--peer", "--data", "x"), "missing --peer"},
		{"write no rkey", without("write", "--rkey", "--data", "x"), "missing --rkey"},
		{"write no addr", without("write", "--addr", "--data", "x"), "missing --addr"},
		{"write no data", with("write", ops), "missing --data STRING or --file FILE"},
		{"write data and file", with("write", ops, "--data", "x", "--file", "f"), "either --data or --file, not both"},
		{"write empty file", with("write", ops, "--file", "/dev/null"), "--file /dev/null: 0 bytes"},
		{"write rkey too big", with("write", ops, "--rkey", "0x100000000", "--data", "x"), `invalid value "0x100000000" for flag -rkey: out of range for 32 bits`},
		{"write rkey word", with("write", ops, "--rkey", "key", "--data", "x"), `invalid value "key" for flag -rkey: not a number`},
		{"write addr negative", with("write", ops, "--addr", "-8", "--data", "x"), `invalid value "-8" for flag -addr`},
		{"write timeout zero", with("write", ops, "--timeout", "0s", "--data", "x"), "--timeout 0s: want a positive duration"},
		{"write timeout word", with("write", ops, "--timeout", "soon", "--data", "x"), `invalid value "soon" for flag -timeout`},
		{"write cm-port", with("write", ops, "--cm-port", "0", "--data", "x"), "--cm-port 0: want a port"},
		{"write bad peer", with("write", ops, "--peer", "127.0.0.1:port", "--data", "x"), `--peer: peer "127.0.0.1:port": bad port "port"`},
		{"write argument", with("write", ops, "--data", "x", "extra"), "too many arguments: extra"},

		{"read no len", with("read", ops), "missing --len N"},
		{"read len zero", with("read", ops, "--len", "0"), "--len 0: want 1 to 1073741824 bytes"},
		{"read len huge", with("read", ops, "--len", "0x80000000"), "--len 2147483648: want 1 to"},
		{"read len word", with("read", ops, "--len", "all"), `invalid value "all" for flag -len`},
		{"read len in GiB", with("read", ops, "--len", "2GiB"), "--len 2147483648: want 1 to 1073741824 bytes"},
		{"read len bad unit", with("read", ops, "--len", "1mi"), `invalid value "1mi" for flag -len: size "1mi": want a number of bytes`},
		{"read no rkey", without("read", "--rkey", "--len", "8"), "missing --rkey"},

		{"fadd no add", with("fadd", ops), "missing --add N"},
		{"fadd add word", with("fadd", ops, "--add", "one"), `invalid value "one" for flag -add`},
		{"fadd misaligned", with("fadd", ops, "--add", "1", "--addr", "0x1004"), "--addr 0x1004: atomics work on 8-byte words"},
		{"fadd no addr", without("fadd", "--addr", "--add", "1"), "missing --addr"},
		{"cswap no compare", with("cswap", ops, "--swap", "1"), "missing --compare VALUE"},
		{"cswap no swap", with("cswap", ops, "--compare", "1"), "missing --swap VALUE"},
		{"cswap swap too big", with("cswap", ops, "--compare", "1", "--swap", "0x10000000000000000"), "out of range for 64 bits"},
		{"cswap misaligned", with("cswap", ops, "--compare", "1", "--swap", "2", "--addr", "3"), "--addr 0x3: atomics work on 8-byte words"},

		{"send no peer", []string{"send", "--data", "x"}, "missing --peer"},
		{"send no data", []string{"send", "--peer", "127.0.0.1"}, "missing --data STRING or --file FILE"},
		{"send rkey", []string{"send", "--peer", "127.0.0.1", "--rkey", "1", "--data", "x"}, "flag provided but not defined: -rkey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tt.args...)
			if code != 2 || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want 2 and nothing", code, stdout)
			}
			first, _, _ := strings.Cut(stderr, "\n")
			if !strings.HasPrefix(first, "softnic "+tt.args[0]+": ") || !strings.Contains(first, tt.stderr) {
				t.Errorf("first line of stderr %q, want it to name the command and contain %q", first, tt.stderr)
			}
			if !strings.Contains(stderr, "usage: softnic "+tt.args[0]) {
				t.Errorf("stderr does not show the usage:\n%s", stderr)
			}
		})
	}
}

// TestNoDaemon: the inspecting commands explain that nothing answers on
// the control socket, and exit with status 1.
func TestNoDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	for _, cmd := range []string{"info", "stat", "mr", "qp"} {
		t.Run(cmd, func(t *testing.T) {
			code, stdout, stderr := runCmd(cmd, "--control", path)
			if code != 1 || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want 1 and nothing", code, stdout)
			}
			if want := "softnic " + cmd + ": no softnic daemon answers on " + path + " (is softnic serve running?"; !strings.HasPrefix(stderr, want) {
				t.Errorf("stderr %q, want it to start with %q", stderr, want)
			}
		})
	}
}
