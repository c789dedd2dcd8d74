package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
)

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
