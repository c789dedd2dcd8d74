package ladder

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/browsertest"
	"github.com/softnic/softnic/internal/golden"
)

// TestHTMLInBrowser opens the page of host_dropack.pcap's ladder in a
// headless Chromium (internal/browsertest; skipped without one): it loads
// from the file alone with no error logged, shows an arrow per packet
// drawn across its conversation, colors the retransmission's arrow as the
// CSS says, and its screenshot, saved in the test's directory, is a PNG of
// the viewport.
func TestHTMLInBrowser(t *testing.T) {
	b := browsertest.Start(t)
	l := readCapture(t, golden.Path(t, "host_dropack.pcap"), Options{})
	dir := t.TempDir()
	file := filepath.Join(dir, "ladder.html")
	var page bytes.Buffer
	if err := WriteHTML(&page, l, "host_dropack.pcap"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.Open(ctx, "file://"+file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Arrows  int     `json:"arrows"`
		Widths  int     `json:"widths"` // arrows whose line is drawn at least 400 px wide
		Rows    int     `json:"rows"`
		Stroke  string  `json:"stroke"`
		Height  float64 `json:"height"`
		Columns int     `json:"columns"`
	}
	err = p.Eval(ctx, `(() => {
		const arrows = [...document.querySelectorAll("svg.ladder g.arrow")];
		return {
			arrows: arrows.length,
			widths: arrows.filter(g => g.querySelector("line").getBBox().width >= 400).length,
			rows: document.querySelectorAll("table tr td:first-child").length,
			stroke: getComputedStyle(document.querySelector("#a10 line")).stroke,
			height: document.querySelector("svg.ladder").getBoundingClientRect().height,
			columns: document.querySelectorAll("svg.ladder line.column").length,
		};
	})()`, &got)
	if err != nil {
		t.Fatal(err)
	}
	if got.Arrows != 11 || got.Widths != 11 || got.Rows != 2 || got.Columns != 2 {
		t.Errorf("the page shows %+v; want 11 arrows, all drawn across, 2 anomaly rows and 2 columns", got)
	}
	if got.Stroke != "rgb(199, 120, 0)" {
		t.Errorf("the retransmission's arrow is drawn in %q, want the warning color rgb(199, 120, 0)", got.Stroke)
	}
	if errs := p.Errors(); len(errs) != 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
	shot, err := p.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ladder.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}
