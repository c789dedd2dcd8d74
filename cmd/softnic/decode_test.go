package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/decode"
	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// goldenCaptures returns every golden capture, or skips.
func goldenCaptures(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(golden.Dir(), "*.pcap"))
	if len(files) == 0 {
		t.Skipf("no golden captures in %s", golden.Dir())
	}
	return files
}

// runStdin runs the command line with stdin and returns exit status,
// stdout and stderr.
func runStdin(stdin []byte, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := runIO(context.Background(), args, bytes.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDecodeJSON: decode --json prints one JSON object per packet, and each
// matches the text line decode prints for the same packet, field by field:
// time, addresses, opcode, ICRC, and every key=value of the summary.
func TestDecodeJSON(t *testing.T) {
	for _, path := range append(goldenCaptures(t), mixedCapture(t)) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			lines, _ := decodeLines(t, path)
			code, stdout, stderr := runCmd("decode", "--json", path)
			if code != 0 || stderr != "" {
				t.Fatalf("exit status %d, stderr %q", code, stderr)
			}
			objs := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(objs) != len(lines) {
				t.Fatalf("%d JSON objects, %d text lines", len(objs), len(lines))
			}
			for i, line := range lines {
				d := json.NewDecoder(strings.NewReader(objs[i]))
				d.UseNumber()
				d.DisallowUnknownFields()
				var j map[string]any
				if err := d.Decode(&j); err != nil {
					t.Fatalf("object %d: %v: %s", i+1, err, objs[i])
				}
				matchJSON(t, line, j)
			}
		})
	}
}

// matchJSON checks a decoded object against its text line.
func matchJSON(t *testing.T, line string, j map[string]any) {
	t.Helper()
	fail := func(what string, got any) { t.Errorf("%s: JSON %s is %v\nline %s", what, what, got, line) }
	head, rest, _ := strings.Cut(line, " → ")
	secs, src, _ := strings.Cut(head, " ")
	dst, rest, _ := strings.Cut(rest, " ")
	if got := fmt.Sprintf("%.6f", num(j["time"])); got != secs {
		fail("time", got)
	}
	if j["src"] != src || j["dst"] != dst {
		fail("src/dst", []any{j["src"], j["dst"]})
	}
	if msg, ok := strings.CutPrefix(rest, "undecodable "); ok {
		if e, _ := j["error"].(string); e == "" || !strings.HasSuffix(msg, e) {
			fail("error", j["error"])
		}
		return
	}
	name, kvs, _ := strings.Cut(rest, " qp=")
	if j["opcode"] != name {
		fail("opcode", j["opcode"])
	}
	fields := summaryFields("qp=" + kvs)
	icrc := strings.TrimPrefix(fields[len(fields)-1], "icrc=")
	if want := map[string]string{"ok": "ok", "BAD": "BAD"}[icrc]; j["icrc"] != want {
		fail("icrc", j["icrc"])
	}
	// The summary's keys and where --json has them. A CM MAD's summary
	// follows its packet's, after "CM Name".
	paths := map[string][]string{
		"qp": {"bth.DestQP"}, "psn": {"bth.PSN"}, "ackreq": {"bth.AckReq"},
		"qkey": {"deth.QKey"}, "srcqp": {"deth.SrcQP"}, "plt": {"feth.PlacementType"}, "sel": {"feth.SelectivityLevel"},
		"va": {"reth.VA", "atomic_eth.VA"}, "rkey": {"reth.RKey", "atomic_eth.RKey"}, "dmalen": {"reth.DMALen"},
		"add": {"atomic_eth.SwapAdd"}, "swap": {"atomic_eth.SwapAdd"}, "compare": {"atomic_eth.Compare"},
		"syndrome": {"syndrome"}, "msn": {"aeth.MSN"}, "orig": {"atomic_ack_eth.OrigData"},
		"imm": {"imm_dt"}, "invrkey": {"ieth"}, "payload": {"payload"},
	}
	for i, f := range fields[:len(fields)-1] {
		if f == "CM" {
			matchMAD(t, line, fields[i+1:len(fields)-1], j)
			break
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Errorf("field %q is not key=value: %s", f, line)
			continue
		}
		ps, ok := paths[k]
		if !ok {
			t.Errorf("the test does not know where --json has %q", k)
			continue
		}
		found := false
		for _, p := range ps {
			if got, ok := jsonAt(j, p); ok && sameValue(got, v) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s=%s: JSON has %v at %v\nline %s", k, v, values(j, ps), ps, line)
		}
	}
}

// matchMAD checks a CM summary ("ConnectRequest comm_id=... qpn=...")
// against the object's "mad".
func matchMAD(t *testing.T, line string, fields []string, j map[string]any) {
	t.Helper()
	mad, _ := j["mad"].(map[string]any)
	if mad == nil || len(fields) == 0 || mad["attr"] != fields[0] {
		t.Errorf("CM %v: JSON mad %v\nline %s", fields, mad, line)
		return
	}
	var msg map[string]any
	for _, k := range []string{"req", "mra", "rej", "rep", "rtu", "dreq", "drep"} {
		if m, ok := mad[k].(map[string]any); ok {
			msg = m
		}
	}
	paths := map[string][]string{
		"comm_id": {"LocalCommID"}, "remote_comm_id": {"RemoteCommID"}, "qpn": {"LocalQPN", "RemoteQPN"},
		"psn": {"StartingPSN"}, "service_id": {"ServiceID"}, "service_timeout": {"ServiceTimeout"},
	}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		if k == "mraed" || k == "rejected" || k == "reason" {
			continue // names of numbers: the numbers are in the message
		}
		found := false
		for _, p := range paths[k] {
			if got, ok := msg[p]; ok && sameValue(got, v) {
				found = true
			}
		}
		if !found {
			t.Errorf("CM %s=%s: JSON message %v\nline %s", k, v, msg, line)
		}
	}
}

// summaryFields splits a summary at its spaces, except those in
// parentheses: "syndrome=NAK(PSN sequence error)" is one field.
func summaryFields(s string) []string {
	var fields []string
	depth, start := 0, 0
	for i, c := range s + " " {
		switch {
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ' ' && depth == 0:
			if i > start {
				fields = append(fields, s[start:i])
			}
			start = i + 1
		}
	}
	return fields
}

// jsonAt follows a dotted path in a decoded object.
func jsonAt(j map[string]any, path string) (any, bool) {
	var v any = j
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func values(j map[string]any, paths []string) []any {
	var vs []any
	for _, p := range paths {
		v, _ := jsonAt(j, p)
		vs = append(vs, v)
	}
	return vs
}

// sameValue compares a JSON value with the text's: numbers in hex or
// decimal, ackreq as 0 or 1, strings as they are.
func sameValue(got any, text string) bool {
	switch g := got.(type) {
	case json.Number:
		n, err := strconv.ParseUint(string(g), 10, 64)
		want, werr := strconv.ParseUint(text, 0, 64)
		return err == nil && werr == nil && n == want
	case bool:
		return text == map[bool]string{true: "1", false: "0"}[g]
	case string:
		return g == text
	}
	return false
}

func num(v any) float64 {
	n, _ := v.(json.Number).Float64()
	return n
}

// mixedCapture writes TestDecodeMixed's capture: a good packet, an
// undecodable one, one with a bad ICRC, and an ARP frame.
func mixedCapture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mixed.pcap")
	if err := os.WriteFile(path, mixedFile(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDecodeStdin: "-" reads the capture from standard input, pcap or
// pcapng alike, and prints what decode of the file prints.
func TestDecodeStdin(t *testing.T) {
	path := golden.Path(t, "host_dropack.pcap")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{"pcap": b}
	if tshark, err := exec.LookPath("tshark"); err == nil {
		ng := filepath.Join(t.TempDir(), "capture.pcapng")
		if out, err := exec.Command(tshark, "-r", path, "-F", "pcapng", "-w", ng).CombinedOutput(); err != nil {
			t.Fatalf("tshark: %v\n%s", err, out)
		}
		if inputs["pcapng by tshark"], err = os.ReadFile(ng); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("tshark is not on PATH: pcapng from standard input not tested (install Debian's tshark)")
	}
	for _, args := range [][]string{{"decode"}, {"decode", "-v"}, {"decode", "--json"}, {"decode", "--ladder"}} {
		_, want, _ := runCmd(append(args, path)...)
		for name, in := range inputs {
			code, got, stderr := runStdin(in, append(args, "-")...)
			if code != 0 || stderr != "" || got != want {
				t.Errorf("%v - of %s: exit status %d, stderr %q, output differs from the file's:\n%s\nwant:\n%s", args, name, code, stderr, got, want)
			}
		}
	}
	code, _, stderr := runStdin([]byte("not a capture"), "decode", "-")
	if code != 1 || !strings.Contains(stderr, "softnic decode: standard input: wire: not a pcap file") {
		t.Errorf("text on standard input: exit status %d, stderr %q", code, stderr)
	}
}

// TestDecodeLadder: --ladder prints the ladder instead of lines (the same
// as the ladder package's golden file), and --html writes its page.
func TestDecodeLadder(t *testing.T) {
	path := golden.Path(t, "host_dropack.pcap")
	page := filepath.Join(t.TempDir(), "ladder.html")
	code, stdout, stderr := runCmd("decode", "--ladder", "--html", page, path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	want, err := os.ReadFile(filepath.Join("internal", "ladder", "testdata", "host_dropack.ladder"))
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(want) {
		t.Errorf("decode --ladder:\n%s\nwant:\n%s", stdout, want)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<title>softnic decode " + path, "<svg", `id="a10"`, "retransmission (timeout)"} {
		if !bytes.Contains(html, []byte(s)) {
			t.Errorf("the page lacks %q", s)
		}
	}
	// --ack-timeout, as perftest's -u exponent or a duration.
	for _, v := range []string{"14", "67.108864ms"} {
		_, out, _ := runCmd("decode", "--ladder", "--ack-timeout", v, path)
		if !strings.Contains(out, "the ACK timeout is 67.1 ms") {
			t.Errorf("--ack-timeout %s: the retransmission is not compared with it:\n%s", v, out)
		}
	}
}

func TestDecodeUsage(t *testing.T) {
	path := golden.Path(t, "write_small.pcap")
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"--json", "-v", path}, "--json prints every field already"},
		{[]string{"--json", "--ladder", path}, "--json prints every field already"},
		{[]string{"--ladder", "-v", path}, "leave out -v"},
		{[]string{"--ack-timeout", "0", path}, "want a duration"},
		{[]string{"--ack-timeout", "soon", path}, "want a duration"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCmd(append([]string{"decode"}, tt.args...)...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tt.msg) {
			t.Errorf("%v: exit status %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, stdout, stderr, tt.msg)
		}
	}
}

// TestDecodeJSONFields: the JSON of a packet holds every field of every
// header it carries, as package wire names them.
func TestDecodeJSONFields(t *testing.T) {
	code, stdout, _ := runCmd("decode", "--json", golden.Path(t, "atomic_fadd.pcap"))
	if code != 0 {
		t.Fatal(code)
	}
	var j decode.PacketJSON
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &j); err != nil {
		t.Fatal(err)
	}
	if j.BTH == nil || j.AtomicETH == nil || j.RETH != nil || j.AETH != nil || j.AtomicETH.SwapAdd != 1 {
		t.Errorf("FETCH_ADD: %+v", j)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[decode.PacketJSON](), reflect.TypeFor[decode.MADJSON]()} {
		for i := range typ.NumField() {
			if f := typ.Field(i); f.Tag.Get("json") == "" {
				t.Errorf("%v.%s has no JSON name", typ, f.Name)
			}
		}
	}
}

// TestDecodeGSO: a UDP GSO send captured whole (tcpdump on loopback sees
// softnic's so) decodes as the packets it carries, each with a good ICRC.
func TestDecodeGSO(t *testing.T) {
	env := wire.Envelope{Src: netip.MustParseAddrPort("127.0.0.1:40000"), Dst: netip.MustParseAddrPort("127.0.0.1:40001")}
	var gso []byte
	for i, op := range []wire.OpCode{wire.OpRCWriteMiddle, wire.OpRCWriteMiddle, wire.OpRCWriteLast} {
		f := wire.Fields{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: 0x11, PSN: wire.PSN(7 + i)}}
		n := 1024
		if op == wire.OpRCWriteLast {
			n = 100
		}
		b := make([]byte, f.Len(n))
		if _, err := f.Encode(b, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		env.Seal(b)
		gso = append(gso, b...)
	}
	var file bytes.Buffer
	w, err := wire.NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(time.Unix(1700000000, 0), &env, gso); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runStdin(file.Bytes(), "decode", "-")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || stderr != "" || len(lines) != 4 {
		t.Fatalf("exit status %d, stderr %q, output:\n%s", code, stderr, stdout)
	}
	for i, psn := range []string{"psn=0x000007", "psn=0x000008", "psn=0x000009"} {
		if !strings.Contains(lines[i], psn) || !strings.HasSuffix(lines[i], " icrc=ok") {
			t.Errorf("line %d: %s", i+1, lines[i])
		}
	}
	if want := "3 RoCEv2 packets (0 bad ICRC, 0 undecodable), 3 of them found by their ICRC on other UDP ports, 3 of them cut from 1 UDP GSO send captured whole, 0 other frames skipped"; lines[3] != want {
		t.Errorf("summary %q, want %q", lines[3], want)
	}
}
