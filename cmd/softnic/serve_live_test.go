package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/internal/browsertest"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the live page's screenshot to docs/live.png for the README")

// TestServeLivePage opens the live page of a daemon in a headless Chromium
// (internal/browsertest; skipped without one): it loads with no error
// logged, shows the daemon's QPs with their state lit in the state machine
// and its regions with their keys, and as WRITEs flow its ladder draws
// them and its counters count them. The screenshot is saved in the test's
// directory (and, with -update-screenshot, in docs/live.png).
func TestServeLivePage(t *testing.T) {
	b := browsertest.Start(t)
	d := startDaemon(t, "--http", "127.0.0.1:0", "--region", "mem:64k:rwa", "--region", "ro:4k:r")
	if !strings.HasPrefix(d.ready.HTTP, "http://127.0.0.1:") {
		t.Fatalf("ready line's http %q, want the page's URL", d.ready.HTTP)
	}
	conn, cq, _ := dialDaemonCQ(t, d, nic.Config{})
	served := conn.QP().Attr().DestQPN // the daemon's QP of the connection
	attached := attachedQP(t, d)       // an attached process's QP, in RESET
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := b.Open(ctx, d.ready.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	mem := d.ready.Regions[0]
	for _, cond := range []string{
		fmt.Sprintf(`document.querySelector('.qp[data-qpn="%d"] .state.current').dataset.state == "RTS"`, served),
		fmt.Sprintf(`document.querySelector('.qp[data-qpn="%d"] .state.current').dataset.state == "RESET"`, attached.Num()),
		fmt.Sprintf(`document.querySelector('#regions tr[data-rkey="%d"]').textContent.includes("mem")`, mem.RKey),
		fmt.Sprintf(`document.querySelector('#regions tr[data-rkey="%d"]').textContent.includes("rwa")`, mem.RKey),
		`document.querySelectorAll('.qp .state').length >= 14`, // 7 states a QP
		`document.querySelector("#status").textContent == "live"`,
	} {
		if err := p.WaitFor(ctx, cond); err != nil {
			t.Fatal(err)
		}
	}
	var before float64
	if err := p.Eval(ctx, `Number(document.querySelector('.counter[data-name="rcvd_pkts"]').dataset.value)`, &before); err != nil {
		t.Fatal(err)
	}

	// WRITEs: the ladder draws them, the counters count them, the QP's
	// PSNs move.
	const writes = 6
	for i := range writes {
		wr := &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled | verbs.Inline, Inline: []byte("projector"),
			RemoteAddr: mem.Addr, RKey: mem.RKey}
		if err := conn.QP().PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		if _, err := cq.Wait(ctx, wc); err != nil || wc[0].Status != verbs.Success {
			t.Fatalf("WRITE %d: %v %v", i, err, wc[0].Status)
		}
	}
	for _, cond := range []string{
		fmt.Sprintf(`[...document.querySelectorAll("#ladder g.arrow text.label")].filter(e => e.textContent.includes("RDMA Write Only")).length >= %d`, writes),
		fmt.Sprintf(`Number(document.querySelector('.counter[data-name="rcvd_pkts"]').dataset.value) >= %v`, before+writes),
		fmt.Sprintf(`document.querySelector('.qp[data-qpn="%d"] .psns').textContent.includes("MSN %d")`, served, writes),
	} {
		if err := p.WaitFor(ctx, cond); err != nil {
			t.Fatal(err)
		}
	}
	// A READ with a bad rkey: the daemon NAKs it, the ladder names it.
	if code, _, _ := d.op(0, "read", "--rkey", fmt.Sprint(mem.RKey+0x100), "--addr", d.addr(0, 0), "--len", "8"); code != 1 {
		t.Errorf("a READ with a bad rkey: exit status %d, want 1", code)
	}
	if err := p.WaitFor(ctx, `[...document.querySelectorAll("#anomalies .kind")].some(e => e.textContent == "NAK")`); err != nil {
		t.Error(err)
	}
	if errs := p.Errors(); len(errs) != 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
	// The whole page, as the README shows it: a projector's width, and
	// the height that shows the ladder's NAK.
	if err := p.SetViewport(ctx, 1280, 1000); err != nil {
		t.Fatal(err)
	}
	shot, err := p.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{filepath.Join(t.TempDir(), "live.png")}
	if *updateScreenshot {
		paths = append(paths, filepath.Join("..", "..", "docs", "live.png"))
	}
	for _, path := range paths {
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServeLiveHTTP: the live page's flags and what it answers without a
// browser: a non-loopback address refused unless allowed, GET only,
// requests for another host name refused, a snapshot as JSON, and a
// stream of them as Server-Sent Events.
func TestServeLiveHTTP(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":8080", "192.0.2.1:80"} {
		code, _, stderr := runCmd("serve", "--http", addr, "--control", t.TempDir()+"/ctl.sock")
		if code != 2 || !strings.Contains(stderr, "--http-allow-remote") {
			t.Errorf("--http %s: exit status %d, stderr %q; want 2 and a word of --http-allow-remote", addr, code, stderr)
		}
	}
	d := startDaemon(t, "--http", "localhost:0")
	for _, c := range []struct {
		method, host string
		status       int
	}{{"GET", "", 200}, {"POST", "", 405}, {"GET", "rebound.example.com", 421}, {"GET", "localhost:1", 200}, {"GET", "[::1]:80", 200}} {
		req, _ := http.NewRequest(c.method, d.ready.HTTP, nil)
		if c.host != "" {
			req.Host = c.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s / for host %q: %s, want %d", c.method, c.host, resp.Status, c.status)
		}
	}
	resp, err := http.Get(d.ready.HTTP + "state.json")
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Info    control.Info
		QPs     struct{ Rows []control.QPRow }
		Regions struct{ Rows []control.RegionRow }
		Ladder  struct{ Packets int }
	}
	err = json.NewDecoder(resp.Body).Decode(&snap)
	resp.Body.Close()
	if err != nil || snap.Info.Listen != d.ready.Listen || len(snap.Regions.Rows) == 0 || len(snap.QPs.Rows) == 0 {
		t.Errorf("state.json: %+v, %v", snap, err)
	}

	// The stream: an event within a tick or two.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.ready.HTTP+"events", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("events: Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	event, _ := r.ReadString('\n')
	data, _ := r.ReadString('\n')
	if event != "event: state\n" || !strings.HasPrefix(data, `data: {"time":`) {
		t.Errorf("events began %q %.40q", event, data)
	}
	cancel()
	io.Copy(io.Discard, r)
}
