package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/softnic/softnic/mr"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int
		err  string
	}{
		{in: "1", want: 1},
		{in: "4096", want: 4096},
		{in: "64k", want: 64 << 10},
		{in: "64K", want: 64 << 10},
		{in: "1m", want: 1 << 20},
		{in: "3M", want: 3 << 20},
		{in: "2g", want: 2 << 30},
		{in: "64g", want: 64 << 30},
		{in: "64KiB", want: 64 << 10},
		{in: "64kib", want: 64 << 10},
		{in: "1MiB", want: 1 << 20},
		{in: "1MB", want: 1 << 20},
		{in: "4kb", want: 4 << 10},
		{in: "1G", want: 1 << 30},
		{in: "2GiB", want: 2 << 30},
		{in: "512b", want: 512},
		{in: "4096B", want: 4096},
		{in: "0x100", want: 256},
		{in: "0x1b", want: 27},
		{in: "010", want: 10},
		{in: "1mi", err: "want a number of bytes"},
		{in: "1 MiB", err: "want a number of bytes"},
		{in: "KiB", err: "want a number of bytes"},
		{in: "0x10k", err: "want a number of bytes"},
		{in: "1_000", err: "want a number of bytes"},
		{in: "+5", err: "want a number of bytes"},
		{in: "", err: "want a number of bytes"},
		{in: "k", err: "want a number of bytes"},
		{in: "0", err: "at least one byte"},
		{in: "0k", err: "at least one byte"},
		{in: "-1", err: "want a number of bytes"},
		{in: "1.5m", err: "want a number of bytes"},
		{in: "1t", err: "want a number of bytes"},
		{in: "10 k", err: "want a number of bytes"},
		{in: "65g", err: "larger than 64g"},
		{in: "99999999999999999999", err: "want a number of bytes"},
		{in: "9223372036854775807k", err: "larger than 64g"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseSize(%q) = %d, %v; want an error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			if back, err := parseSize(formatSize(got)); err != nil || back != got {
				t.Errorf("formatSize(%d) = %q does not parse back: %d, %v", got, formatSize(got), back, err)
			}
		})
	}
}

func TestParseAccess(t *testing.T) {
	tests := []struct {
		in      string
		want    mr.Access
		letters string
		err     string
	}{
		{in: "r", want: mr.RemoteRead, letters: "r"},
		{in: "w", want: mr.RemoteWrite | mr.LocalWrite, letters: "w"},
		{in: "a", want: mr.RemoteAtomic | mr.LocalWrite, letters: "a"},
		{in: "rw", want: mr.RemoteRead | mr.RemoteWrite | mr.LocalWrite, letters: "rw"},
		{in: "awr", want: mr.RemoteRead | mr.RemoteWrite | mr.RemoteAtomic | mr.LocalWrite, letters: "rwa"},
		{in: "wa", want: mr.RemoteWrite | mr.RemoteAtomic | mr.LocalWrite, letters: "wa"},
		{in: "", err: "empty access"},
		{in: "rx", err: `'x' is not r, w or a`},
		{in: "R", err: `'R' is not r, w or a`},
		{in: "rr", err: `'r' given twice`},
		{in: "waw", err: `'w' given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseAccess(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseAccess(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseAccess(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if l := accessLetters(got); l != tt.letters {
				t.Errorf("accessLetters(%v) = %q, want %q", got, l, tt.letters)
			}
		})
	}
	if l := accessLetters(mr.LocalWrite); l != "-" {
		t.Errorf("accessLetters(LOCAL_WRITE) = %q, want -", l)
	}
}

func TestParseRegionSpec(t *testing.T) {
	rw := mr.RemoteRead | mr.RemoteWrite | mr.LocalWrite
	tests := []struct {
		in   string
		want regionSpec
		err  string
	}{
		{in: "mem:1m", want: regionSpec{"mem", 1 << 20, rw}},
		{in: "mem:4096:r", want: regionSpec{"mem", 4096, mr.RemoteRead}},
		{in: "a-b_c.1:64k:rwa", want: regionSpec{"a-b_c.1", 64 << 10, rw | mr.RemoteAtomic}},
		{in: "mem", err: "want NAME:SIZE[:ACCESS]"},
		{in: "mem:1m:rw:x", err: "want NAME:SIZE[:ACCESS]"},
		{in: ":1m", err: "the name must be"},
		{in: "m e m:1m", err: "the name must be"},
		{in: "mem:", err: "want a number of bytes"},
		{in: "mem:lots", err: "want a number of bytes"},
		{in: "mem:0", err: "at least one byte"},
		{in: "mem:1m:", err: "empty access"},
		{in: "mem:1m:rwx", err: "is not r, w or a"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseRegionSpec(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), tt.in) {
					t.Fatalf("parseRegionSpec(%q) = %+v, %v; want an error naming the spec and containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseRegionSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRegionsFlag(t *testing.T) {
	var f regionsFlag
	for _, s := range []string{"a:1k", "b:2m:rwa"} {
		if err := f.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Set("a:4k"); err == nil || !strings.Contains(err.Error(), `"a" given twice`) {
		t.Errorf("a repeated name: %v", err)
	}
	if got := f.String(); got != "a:1k:rw b:2m:rwa" {
		t.Errorf("String() = %q", got)
	}
}

func TestNumFlag(t *testing.T) {
	tests := []struct {
		name   string
		bits   int
		signed bool
		in     string
		want   uint64
		err    string
	}{
		{name: "decimal", bits: 32, in: "4660", want: 0x1234},
		{name: "hex", bits: 32, in: "0x1234", want: 0x1234},
		{name: "binary", bits: 8, in: "0b101", want: 5},
		{name: "max 32", bits: 32, in: "0xffffffff", want: 0xffffffff},
		{name: "over 32", bits: 32, in: "0x100000000", err: "out of range for 32 bits"},
		{name: "max 64", bits: 64, in: "18446744073709551615", want: 1<<64 - 1},
		{name: "over 64", bits: 64, in: "18446744073709551616", err: "out of range for 64 bits"},
		{name: "word", bits: 32, in: "twelve", err: "not a number"},
		{name: "empty", bits: 32, in: "", err: "not a number"},
		{name: "negative unsigned", bits: 64, in: "-1", err: "not a number"},
		{name: "negative signed", bits: 64, signed: true, in: "-1", want: 1<<64 - 1},
		{name: "negative hex signed", bits: 64, signed: true, in: "-0x10", want: 1<<64 - 16},
		{name: "positive signed", bits: 64, signed: true, in: "0xffffffffffffffff", want: 1<<64 - 1},
		{name: "too negative", bits: 64, signed: true, in: "-9223372036854775809", err: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := numFlag{bits: tt.bits, signed: tt.signed}
			err := f.Set(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || f.set {
					t.Fatalf("Set(%q): %v, set=%v; want an error containing %q", tt.in, err, f.set, tt.err)
				}
				return
			}
			if err != nil || f.val != tt.want || !f.set {
				t.Fatalf("Set(%q): %v, val %#x set=%v; want %#x", tt.in, err, f.val, f.set, tt.want)
			}
		})
	}
}

func TestResolvePeer(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  string
	}{
		{in: "127.0.0.1:4791", want: "127.0.0.1:4791"},
		{in: "127.0.0.1:18515", want: "127.0.0.1:18515"},
		{in: "127.0.0.1", want: "127.0.0.1:4791"},
		{in: "::1", want: "[::1]:4791"},
		{in: "[::1]", want: "[::1]:4791"},
		{in: "[::1]:5000", want: "[::1]:5000"},
		{in: "localhost:5000"}, // resolved: 127.0.0.1 or ::1
		{in: "", err: "missing --peer"},
		{in: "127.0.0.1:port", err: `bad port "port"`},
		{in: "127.0.0.1:70000", err: `bad port "70000"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := resolvePeer(context.Background(), tt.in)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("resolvePeer(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
				}
			case err != nil:
				t.Fatalf("resolvePeer(%q): %v", tt.in, err)
			case tt.want == "":
				if !got.Addr().IsLoopback() || got.Port() != 5000 {
					t.Fatalf("resolvePeer(%q) = %v, want a loopback address, port 5000", tt.in, got)
				}
			case got != netip.MustParseAddrPort(tt.want):
				t.Fatalf("resolvePeer(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDefaultControlPath(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if got := defaultControlPath(); got != "/run/user/1000/softnic.sock" {
		t.Errorf("with XDG_RUNTIME_DIR: %q", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", "/tmp")
	if got, want := defaultControlPath(), fmt.Sprintf("/tmp/softnic-%d/softnic.sock", os.Getuid()); got != want {
		t.Errorf("without XDG_RUNTIME_DIR: %q, want %q", got, want)
	}
}
