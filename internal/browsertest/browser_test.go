package browsertest

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testPage adds an element 50 ms after loading, logs an error, and asks for
// a script that does not exist.
const testPage = `<!doctype html><title>t</title><body style="background:#123">
<p id=first>hello</p>
<script src="/missing.js"></script>
<script>
console.error("something", 42);
setTimeout(() => { const p = document.createElement("p"); p.id = "later"; p.textContent = "later"; document.body.append(p) }, 50);
</script>`

func TestPage(t *testing.T) {
	b := Start(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(testPage))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.Open(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	if err := p.Eval(ctx, `document.getElementById("first").textContent`, &text); err != nil || text != "hello" {
		t.Errorf("Eval: %q, %v; want hello", text, err)
	}
	var sum int
	if err := p.Eval(ctx, `Promise.resolve(40 + 2)`, &sum); err != nil || sum != 42 {
		t.Errorf("Eval of a promise: %d, %v; want 42", sum, err)
	}
	if err := p.Eval(ctx, `nosuchvariable`, nil); err == nil || !strings.Contains(err.Error(), "nosuchvariable") {
		t.Errorf("Eval of an undefined name: %v, want its ReferenceError", err)
	}
	if err := p.WaitFor(ctx, `document.getElementById("later").textContent == "later"`); err != nil {
		t.Error(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if err := p.WaitFor(short, `false`); err == nil {
		t.Error("WaitFor of a condition that never holds returned nil")
	}
	errs := strings.Join(p.Errors(), "\n")
	for _, want := range []string{"console.error: something 42", "/missing.js"} {
		if !strings.Contains(errs, want) {
			t.Errorf("Errors() = %q, want it to contain %q", errs, want)
		}
	}
	shot, err := p.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != ViewportWidth || sz.Y != ViewportHeight {
		t.Errorf("screenshot of %v, want %dx%d", sz, ViewportWidth, ViewportHeight)
	}
	if r, g, bl, _ := img.At(ViewportWidth-1, ViewportHeight-1).RGBA(); r>>8 != 0x11 || g>>8 != 0x22 || bl>>8 != 0x33 {
		t.Errorf("the corner pixel is %x %x %x, want the page's background #112233", r>>8, g>>8, bl>>8)
	}
	if err := p.SetViewport(ctx, 640, 480); err != nil {
		t.Fatal(err)
	}
	if shot, err = p.Screenshot(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(shot)); err != nil || cfg.Width != 640 || cfg.Height != 480 {
		t.Errorf("screenshot after SetViewport(640, 480): %dx%d, %v", cfg.Width, cfg.Height, err)
	}
}

func TestOpenFails(t *testing.T) {
	b := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there.
	if _, err := b.Open(ctx, "http://127.0.0.1:1/"); err == nil {
		t.Error("opening a URL nothing answers returned no error")
	}
}
