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

// errorRecorder is a testing.TB that keeps the errors reported to it.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckDocumented: a command of a transcript that no line of the
// README's code blocks starts with is reported, once, with its position;
// a command named only in prose does not count.
func TestCheckDocumented(t *testing.T) {
	readme := filepath.Join(t.TempDir(), "README.md")
	doc := "silent is named here, outside a code block.\n\n```\necho [ARG …]   print the command\n```\n"
	if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &errorRecorder{TB: t}
	CheckDocumented(r, readme, []string{"testdata/format.txt"})
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], `command "silent" is not listed`) || !strings.Contains(r.errs[0], "format.txt:") {
		t.Errorf("errors %q, want one naming silent and where it is", r.errs)
	}
	if err := os.WriteFile(readme, []byte(doc+"```\nsilent          print nothing\n```\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.errs = nil
	CheckDocumented(r, readme, []string{"testdata/format.txt"})
	if len(r.errs) != 0 {
		t.Errorf("errors %q with every command listed", r.errs)
	}
}
