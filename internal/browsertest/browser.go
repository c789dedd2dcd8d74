// Package browsertest drives a headless Chromium from Go tests through the
// Chrome DevTools Protocol (CDP): open a page, evaluate JavaScript in it,
// wait for a condition, collect what the page logged as errors, and take a
// screenshot. It is how softnic's pages (the live page of softnic serve
// --http, the HTML ladder) are tested in a real browser.
//
// It speaks CDP over --remote-debugging-pipe, NUL-terminated JSON messages
// on two pipes (the browser reads file descriptor 3 and writes 4), as
// Puppeteer does, rather than over a WebSocket on a TCP port: there is no
// port to pick or to race other tests for, nothing listens on the machine,
// and no WebSocket client is needed. The dozen methods used here do not
// justify a dependency such as chromedp with its generated protocol
// bindings.
//
// Start skips the test when no Chromium is installed (Debian: apt-get
// install chromium; .ci/run installs it).
package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// names are the commands a Chromium is found under, in the order tried.
var names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Find returns the path of an installed Chromium, or an error saying how
// to install one.
func Find() (string, error) {
	if p := os.Getenv("SOFTNIC_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found (apt-get install chromium, or set SOFTNIC_CHROMIUM to its path)")
}

// Browser is a headless Chromium that a test drives.
type Browser struct {
	cmd    *exec.Cmd
	toB    *os.File // the browser's fd 3: our commands
	stderr *tailBuffer

	wmu sync.Mutex // serializes writes to toB

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	pages   map[string]*Page // by CDP session
	err     error            // why the connection ended, once it has
	done    chan struct{}    // closed when the reader stops
}

// reply is the answer to one command.
type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// message is anything the browser writes: a reply (ID set) or an event.
type message struct {
	ID        int64           `json:"id"`
	SessionID string          `json:"sessionId"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	reply
}

// Start starts a headless Chromium for the test, or skips the test if none
// is installed. The test's cleanup ends the browser.
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := Find()
	if err != nil {
		t.Skipf("browsertest: %v", err)
	}
	b, err := Launch(path, t.TempDir())
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// Launch starts the Chromium at path with a new profile in dir.
func Launch(path, dir string) (*Browser, error) {
	cmdR, cmdW, err := os.Pipe() // our commands: the browser reads fd 3
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe() // its replies and events: it writes fd 4
	if err != nil {
		cmdR.Close()
		cmdW.Close()
		return nil, err
	}
	b := &Browser{toB: cmdW, stderr: &tailBuffer{max: 16 << 10}, pending: map[int64]chan reply{},
		pages: map[string]*Page{}, done: make(chan struct{})}
	b.cmd = exec.Command(path,
		// The flags Debian's Chromium needs to run headless as root in a
		// container, and those that keep it off the network.
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+dir, "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, evW}
	b.cmd.Stderr = b.stderr
	err = b.cmd.Start()
	cmdR.Close()
	evW.Close()
	if err != nil {
		cmdW.Close()
		evR.Close()
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	go b.read(evR)
	// The browser answers once it is up; a Chromium that cannot start
	// closes the pipe and says why on stderr.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.call(ctx, "", "Browser.getVersion", nil, nil); err != nil {
		b.Close()
		return nil, fmt.Errorf("%s did not start: %w; its stderr:\n%s", path, err, b.stderr)
	}
	return b, nil
}

// read dispatches the browser's messages until its pipe closes.
func (b *Browser) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	var err error
	for {
		var line []byte
		if line, err = br.ReadBytes(0); err != nil {
			break
		}
		var m message
		if err = json.Unmarshal(line[:len(line)-1], &m); err != nil {
			err = fmt.Errorf("bad message from the browser: %w", err)
			break
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.pending[m.ID]; ch != nil {
				delete(b.pending, m.ID)
				ch <- m.reply
			}
		} else if p := b.pages[m.SessionID]; p != nil {
			p.event(m.Method, m.Params)
		}
		b.mu.Unlock()
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the browser closed its pipe")
	}
	b.mu.Lock()
	b.err = err
	for id, ch := range b.pending {
		delete(b.pending, id)
		close(ch)
	}
	b.mu.Unlock()
	close(b.done)
}

// call sends method with params to the browser (session "") or to a page's
// session, waits for its reply and decodes the result into out, if not nil.
func (b *Browser) call(ctx context.Context, session, method string, params, out any) error {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return b.err
	}
	b.nextID++
	id := b.nextID
	ch := make(chan reply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	b.wmu.Lock()
	_, err = b.toB.Write(append(data, 0))
	b.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			b.mu.Lock()
			defer b.mu.Unlock()
			return fmt.Errorf("%s: %w", method, b.err)
		}
		if r.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Close ends the browser: politely, then by force after 5 s.
func (b *Browser) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.call(ctx, "", "Browser.close", nil, nil) // its reply may never come: it exits
	b.toB.Close()
	exited := make(chan error, 1)
	go func() { exited <- b.cmd.Wait() }()
	select {
	case <-exited:
	case <-ctx.Done():
		b.cmd.Process.Kill()
		<-exited
	}
	<-b.done
}

// Page is one tab of the browser.
type Page struct {
	b       *Browser
	session string

	// Guarded by b.mu (events arrive under it).
	errors []string
	loaded chan struct{} // closed by the next load event
}

// Viewport is the size Open gives a page, in CSS pixels: a projector's.
const (
	ViewportWidth  = 1280
	ViewportHeight = 800
)

// Open opens url in a new tab of ViewportWidth × ViewportHeight and waits
// for its load event.
func (b *Browser) Open(ctx context.Context, url string) (*Page, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	p := &Page{b: b, session: att.SessionID, loaded: make(chan struct{})}
	b.mu.Lock()
	b.pages[p.session] = p
	b.mu.Unlock()
	for _, method := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		if err := b.call(ctx, p.session, method, nil, nil); err != nil {
			return nil, err
		}
	}
	if err := p.SetViewport(ctx, ViewportWidth, ViewportHeight); err != nil {
		return nil, err
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	b.mu.Lock()
	loaded := p.loaded
	b.mu.Unlock()
	if err := b.call(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, fmt.Errorf("opening %s: %s", url, nav.ErrorText)
	}
	select {
	case <-loaded:
		return p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("opening %s: no load event: %w", url, ctx.Err())
	}
}

// event records what the page reports; b.mu is held.
func (p *Page) event(method string, params json.RawMessage) {
	switch method {
	case "Page.loadEventFired":
		close(p.loaded)
		p.loaded = make(chan struct{})
	case "Runtime.consoleAPICalled":
		var e struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		if json.Unmarshal(params, &e) == nil && (e.Type == "error" || e.Type == "assert") {
			var parts []string
			for _, a := range e.Args {
				if a.Description != "" {
					parts = append(parts, a.Description)
				} else {
					parts = append(parts, fmt.Sprint(a.Value))
				}
			}
			p.errors = append(p.errors, "console."+e.Type+": "+strings.Join(parts, " "))
		}
	case "Runtime.exceptionThrown":
		var e struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		if json.Unmarshal(params, &e) == nil {
			p.errors = append(p.errors, "exception: "+e.Details.Text+" "+e.Details.Exception.Description)
		}
	case "Log.entryAdded":
		// The browser's own errors about the page: a resource that did not
		// load, a blocked request, a violated content security policy.
		var e struct {
			Entry struct {
				Level, Source, Text, URL string
			} `json:"entry"`
		}
		if json.Unmarshal(params, &e) == nil && e.Entry.Level == "error" {
			p.errors = append(p.errors, e.Entry.Source+": "+e.Entry.Text+" "+e.Entry.URL)
		}
	}
}

// Errors returns what the page has logged as errors so far: console.error
// calls, uncaught exceptions and the browser's error entries (a resource
// that failed to load, for one).
func (p *Page) Errors() []string {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return append([]string(nil), p.errors...)
}

// Eval evaluates the JavaScript expression expr in the page, awaiting it if
// it is a promise, and decodes its value, as JSON, into out if not nil.
func (p *Page) Eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := p.b.call(ctx, p.session, "Runtime.evaluate",
		map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	if err != nil {
		return err
	}
	if res.Exception != nil {
		return fmt.Errorf("evaluating %q: %s %s", expr, res.Exception.Text, res.Exception.Exception.Description)
	}
	if out == nil {
		return nil
	}
	if len(res.Result.Value) == 0 {
		return fmt.Errorf("evaluating %q: no value", expr)
	}
	return json.Unmarshal(res.Result.Value, out)
}

// WaitFor waits until the JavaScript expression cond is true in the page,
// or ctx ends. The page checks cond every 10 ms and answers once it holds,
// so the test waits for one reply; an expression that throws counts as
// false (the element it looks at may not exist yet).
func (p *Page) WaitFor(ctx context.Context, cond string) error {
	expr := `new Promise(resolve => { const check = () => { let ok = false; try { ok = !!(` + cond +
		`) } catch (e) {} if (ok) resolve(true); else setTimeout(check, 10) }; check() })`
	if err := p.Eval(ctx, expr, nil); err != nil {
		return fmt.Errorf("waiting for %s: %w", cond, err)
	}
	return nil
}

// SetViewport makes the page's viewport width × height CSS pixels.
func (p *Page) SetViewport(ctx context.Context, width, height int) error {
	return p.b.call(ctx, p.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
}

// Screenshot returns a PNG of the page's viewport.
func (p *Page) Screenshot(ctx context.Context) ([]byte, error) {
	var res struct {
		Data string `json:"data"`
	}
	if err := p.b.call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// tailBuffer keeps the last max bytes written to it: the browser's stderr,
// for the error when it does not start.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
