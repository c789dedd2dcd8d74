package flagval

import (
	"math"
	"strings"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/quota"
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
			got, err := ParseSize(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseSize(%q) = %d, %v; want an error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			if back, err := ParseSize(FormatSize(got)); err != nil || back != got {
				t.Errorf("FormatSize(%d) = %q does not parse back: %d, %v", got, FormatSize(got), back, err)
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
			got, err := ParseAccess(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseAccess(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseAccess(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if l := AccessLetters(got); l != tt.letters {
				t.Errorf("AccessLetters(%v) = %q, want %q", got, l, tt.letters)
			}
		})
	}
	if l := AccessLetters(mr.LocalWrite); l != "-" {
		t.Errorf("AccessLetters(LOCAL_WRITE) = %q, want -", l)
	}
}

func TestParseRegionSpec(t *testing.T) {
	rw := mr.RemoteRead | mr.RemoteWrite | mr.LocalWrite
	tests := []struct {
		in   string
		want Region
		err  string
	}{
		{in: "mem:1m", want: Region{"mem", 1 << 20, rw}},
		{in: "mem:4096:r", want: Region{"mem", 4096, mr.RemoteRead}},
		{in: "a-b_c.1:64k:rwa", want: Region{"a-b_c.1", 64 << 10, rw | mr.RemoteAtomic}},
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
			got, err := ParseRegion(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), tt.in) {
					t.Fatalf("ParseRegion(%q) = %+v, %v; want an error naming the spec and containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseRegion(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRegionsFlag(t *testing.T) {
	var f Regions
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
			f := Num{Bits: tt.bits, Signed: tt.signed}
			err := f.Set(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || f.Given {
					t.Fatalf("Set(%q): %v, set=%v; want an error containing %q", tt.in, err, f.Given, tt.err)
				}
				return
			}
			if err != nil || f.Val != tt.want || !f.Given {
				t.Fatalf("Set(%q): %v, val %#x set=%v; want %#x", tt.in, err, f.Val, f.Given, tt.want)
			}
		})
	}
}

func TestLimitsFlag(t *testing.T) {
	var f Limits
	for _, s := range []string{"process.qps=4096", "uid.memory=64g", "total.heap=1GiB", "process.waits=unlimited"} {
		if err := f.Set(s); err != nil {
			t.Errorf("Set(%q): %v", s, err)
		}
	}
	var l quota.Limits
	f.Apply(&l)
	if l[quota.Process][quota.QPs] != 4096 || l[quota.User][quota.Memory] != 64<<30 || l[quota.Total][quota.Heap] != 1<<30 ||
		l[quota.Process][quota.Waits] != math.MaxInt64 {
		t.Errorf("limits %v", l)
	}
	for _, bad := range []string{"process.qps", "process.qps=0", "process.qps=-1", "process.qps=lots", "host.qps=1", "process.cpus=1", "=1",
		"uid.memory=99999999999g"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
}
