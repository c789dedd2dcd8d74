package datadriven

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// echo returns a case's command, arguments and input, so that the
// transcript shows what was parsed.
func echo(t *testing.T, d *TestData) string {
	if d.Cmd == "silent" {
		return ""
	}
	var b strings.Builder
	b.WriteString(d.Cmd)
	for _, a := range d.CmdArgs {
		b.WriteString(" " + a.Key)
		if a.Vals != nil {
			fmt.Fprintf(&b, "=%v", a.Vals)
		}
	}
	b.WriteString("\n")
	if d.Input != "" {
		b.WriteString(d.Input + "\n")
	}
	return b.String()
}

func TestFormat(t *testing.T) { RunTest(t, "testdata/format.txt", echo) }

// TestRewriteKeepsFile: rewriting a transcript whose outputs are right
// gives the same bytes, comments and blank lines included.
func TestRewriteKeepsFile(t *testing.T) {
	want, err := os.ReadFile("testdata/format.txt")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "format.txt")
	if err := os.WriteFile(path, append(want, "\n# a trailing comment\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	RunTestRewriting(t, path, true, echo)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want)+"\n# a trailing comment\n" {
		t.Errorf("rewritten:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct{ text, msg string }{
		{"cmd\nno separator\n", `no "----" after the command`},
		{"cmd x=(a\n----\n", "unbalanced parentheses"},
		{"cmd x=(a)b\n----\n", "unclosed ("},
		{"cmd\n----\n----\nout\n", "not closed by two lines"},
	} {
		if _, _, err := parse("f.txt", tt.text); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("parse(%q): %v, want an error mentioning %q", tt.text, err, tt.msg)
		}
	}
}
