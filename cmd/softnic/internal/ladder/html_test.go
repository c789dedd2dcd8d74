package ladder

import (
	"bytes"
	"encoding/xml"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/internal/golden"
)

// TestHTML renders the ladder of every golden capture as a page and
// parses it as XML, so that it is well-formed (a browser's HTML5 parser
// takes it too: TestHTMLInBrowser). The page must link to no other
// resource and hold no script, and have one arrow group with a line per
// packet, and one table row per anomaly.
func TestHTML(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(golden.Dir(), "*.pcap"))
	if len(files) == 0 {
		t.Skipf("no golden captures in %s", golden.Dir())
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			l := readCapture(t, path, Options{})
			var page bytes.Buffer
			if err := WriteHTML(&page, l, "ladder of "+filepath.Base(path)+" <&>"); err != nil {
				t.Fatal(err)
			}
			p := parsePage(t, page.Bytes())
			if n := len(l.Arrows()); p.svgs != 1 || p.arrows != n || p.lines != n {
				t.Errorf("%d svg, %d arrow groups with %d lines; want 1 and %d each", p.svgs, p.arrows, p.lines, n)
			}
			if n := len(l.Anomalies()); p.rows != n {
				t.Errorf("%d anomaly rows, want %d", p.rows, n)
			}
			if !strings.HasSuffix(p.title, " <&>") {
				t.Errorf("title %q: not escaped and unescaped back", p.title)
			}
		})
	}
}

// page is what parsePage counts in a page.
type page struct {
	title                     string
	svgs, arrows, lines, rows int
}

// parsePage parses a page as strict XML and counts its parts; it fails the
// test if the page is not well-formed or needs anything but itself.
func parsePage(t *testing.T, b []byte) page {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	d.Entity = xml.HTMLEntity
	var (
		p          page
		stack      []string // the open elements
		inArrow    bool
		rowCounted bool // the open tr has a td, counted
	)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return p
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			name := tok.Name.Local
			for _, a := range tok.Attr {
				if (a.Name.Local == "src" || a.Name.Local == "href") && !strings.HasPrefix(a.Value, "#") {
					t.Errorf("<%s %s=%q> needs another resource", name, a.Name.Local, a.Value)
				}
				if name == "g" && a.Name.Local == "class" && strings.HasPrefix(a.Value, "arrow") {
					p.arrows++
					inArrow = true
				}
			}
			switch name {
			case "svg":
				p.svgs++
			case "line":
				if inArrow {
					p.lines++
				}
			case "tr":
				rowCounted = false
			case "td":
				if !rowCounted {
					p.rows++
					rowCounted = true
				}
			case "script", "link", "img", "iframe", "object":
				t.Errorf("the page has a <%s>", name)
			}
			stack = append(stack, name)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			if tok.Name.Local == "g" {
				inArrow = false
			}
		case xml.CharData:
			if len(stack) >= 2 && stack[len(stack)-1] == "title" && stack[len(stack)-2] == "head" {
				p.title += string(tok)
			}
		}
	}
}
