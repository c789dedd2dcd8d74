// Package datadriven runs transcript tests: files in which each test case
// is a command, its input and the output it must produce, readable
// without Go. It reads and writes the format of cockroachdb/datadriven,
// which etcd raft's interaction tests use:
//
//	# A comment.
//	command arg key=value key=(v1, v2)
//	input lines, if the command takes any
//	----
//	the output it must produce
//
// An output that holds blank lines sits between two lines of "----" and
// ends with two more. A test's function gets each case in turn and
// returns its output; a case whose output differs fails. Run the test
// with -rewrite to write the outputs instead (review the diff before
// committing).
package datadriven

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of the transcript tests in testdata")

// Rewriting reports whether the test run rewrites expected outputs
// (-rewrite) instead of comparing them.
func Rewriting() bool { return *rewrite }

// TestData is one case of a transcript.
type TestData struct {
	Pos      string // file:line of the command, for messages
	Cmd      string
	CmdArgs  []CmdArg
	Input    string // the lines between the command and "----"
	Expected string
}

// CmdArg is an argument of a command: a key alone, key=value or
// key=(v1, v2).
type CmdArg struct {
	Key  string
	Vals []string
}

// Arg returns the values of the argument key and whether the command has
// it.
func (d *TestData) Arg(key string) ([]string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a.Vals, true
		}
	}
	return nil, false
}

// Fatalf fails the test with a message that names the case's position.
func (d *TestData) Fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s: %s: %s", d.Pos, d.Cmd, fmt.Sprintf(format, args...))
}

// RunTest runs every case of the transcript at path through f, in order,
// and compares (or, with -rewrite, replaces) the outputs. If the file
// cannot be parsed the test fails.
func RunTest(t *testing.T, path string, f func(t *testing.T, d *TestData) string) {
	t.Helper()
	RunTestRewriting(t, path, Rewriting(), f)
}

// RunTestRewriting is RunTest with rewriting chosen by the caller: a
// transcript run again under other conditions (such as other initial
// PSNs) must give the same outputs and never rewrites them.
func RunTestRewriting(t *testing.T, path string, rewrite bool, f func(t *testing.T, d *TestData) string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases, trailer, err := parse(path, string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, c := range cases {
		out.WriteString(c.prefix)
		got := f(t, &c.TestData)
		if got != "" && !strings.HasSuffix(got, "\n") {
			got += "\n"
		}
		if rewrite {
			out.WriteString(c.header)
			writeOutput(&out, got)
			continue
		}
		if got != c.Expected {
			t.Errorf("%s: %s: output differs (run with -rewrite to accept):\ngot:\n%s\nwant:\n%s", c.Pos, c.Cmd, got, c.Expected)
		}
	}
	if rewrite {
		out.WriteString(trailer)
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func writeOutput(b *strings.Builder, got string) {
	if strings.Contains(got, "\n\n") {
		fmt.Fprintf(b, "----\n----\n%s----\n----\n", got)
		return
	}
	fmt.Fprintf(b, "----\n%s", got)
}

type testCase struct {
	TestData
	prefix string // the comments and blank lines before the command
	header string // the command and its input
}

// parse splits a transcript into its cases and what follows the last one
// (comments, blank lines), which a rewrite keeps.
func parse(path, text string) ([]testCase, string, error) {
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var cases []testCase
	var prefix strings.Builder
	for i := 0; i < len(lines); {
		line := strings.TrimRight(lines[i], "\n")
		if trimmed := strings.TrimSpace(line); trimmed == "" || strings.HasPrefix(trimmed, "#") {
			prefix.WriteString(line + "\n")
			i++
			continue
		}
		c := testCase{prefix: prefix.String()}
		prefix.Reset()
		c.Pos = fmt.Sprintf("%s:%d", path, i+1)
		var err error
		if c.Cmd, c.CmdArgs, err = parseCommand(line); err != nil {
			return nil, "", fmt.Errorf("%s: %v", c.Pos, err)
		}
		header := []string{line}
		for i++; i < len(lines) && strings.TrimRight(lines[i], "\n") != "----"; i++ {
			header = append(header, strings.TrimRight(lines[i], "\n"))
		}
		if i == len(lines) {
			return nil, "", fmt.Errorf("%s: no \"----\" after the command", c.Pos)
		}
		c.Input = strings.Join(header[1:], "\n")
		c.header = strings.Join(header, "\n") + "\n"
		i++
		var out []string
		if i < len(lines) && strings.TrimRight(lines[i], "\n") == "----" {
			// The blank-line form: until two lines of "----".
			for i++; ; i++ {
				if i+1 >= len(lines) {
					return nil, "", fmt.Errorf("%s: output not closed by two lines of \"----\"", c.Pos)
				}
				if strings.TrimRight(lines[i], "\n") == "----" && strings.TrimRight(lines[i+1], "\n") == "----" {
					i += 2
					break
				}
				out = append(out, lines[i])
			}
		} else {
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
				out = append(out, lines[i])
			}
		}
		c.Expected = strings.Join(out, "")
		if c.Expected != "" && !strings.HasSuffix(c.Expected, "\n") {
			c.Expected += "\n"
		}
		cases = append(cases, c)
	}
	return cases, prefix.String(), nil
}

// parseCommand splits "cmd a b=1 c=(x, y)" into its name and arguments.
func parseCommand(line string) (string, []CmdArg, error) {
	fields, err := splitArgs(line)
	if err != nil {
		return "", nil, err
	}
	var args []CmdArg
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		a := CmdArg{Key: k}
		switch {
		case !ok:
		case strings.HasPrefix(v, "("):
			if !strings.HasSuffix(v, ")") {
				return "", nil, fmt.Errorf("argument %q: unclosed (", f)
			}
			for _, x := range strings.Split(v[1:len(v)-1], ",") {
				a.Vals = append(a.Vals, strings.TrimSpace(x))
			}
		default:
			a.Vals = []string{v}
		}
		args = append(args, a)
	}
	return fields[0], args, nil
}

// splitArgs splits a command line at spaces outside parentheses.
func splitArgs(line string) ([]string, error) {
	var fields []string
	depth, start := 0, -1
	for i, r := range line + " " {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ' ' && depth == 0:
			if start >= 0 {
				fields = append(fields, line[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced parentheses in %q", line)
	}
	return fields, nil
}

// CheckDocumented fails t for each command of the transcripts at paths
// that no line of a code block (between lines of ```) of the Markdown file
// readme starts with: the list of commands a reader without Go reads the
// transcripts by.
func CheckDocumented(t testing.TB, readme string, paths []string) {
	t.Helper()
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	listed, inBlock := map[string]bool{}, false
	for line := range strings.Lines(string(doc)) {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
		} else if cmd, _, _ := strings.Cut(strings.TrimSpace(line), " "); inBlock && cmd != "" {
			listed[cmd] = true
		}
	}
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cases, _, err := parse(path, string(text))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if !listed[c.Cmd] {
				t.Errorf("%s: command %q is not listed in %s", c.Pos, c.Cmd, readme)
				listed[c.Cmd] = true // once
			}
		}
	}
}
