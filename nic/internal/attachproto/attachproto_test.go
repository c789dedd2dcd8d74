package attachproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire/mad"
)

// roundTrip describes err in a message, sends it as a line and rebuilds
// the error from the line, as the two sides of the socket do.
func roundTrip(t testing.TB, err error) (Msg, error) {
	t.Helper()
	var m Msg
	m.SetError(err)
	line, jerr := json.Marshal(&m)
	if jerr != nil {
		t.Fatal(jerr)
	}
	var got Msg
	if jerr := json.Unmarshal(line, &got); jerr != nil {
		t.Fatal(jerr)
	}
	return got, got.Err()
}

// TestErrorsCrossTheSocket: an error keeps its text, and what errors.Is
// and errors.As find in it, from one side of the socket to the other.
func TestErrorsCrossTheSocket(t *testing.T) {
	rej := &cm.RejectError{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Port: 7000,
		Reason: mad.RejectInvalidServiceID, PrivateData: []byte{1, 2}}
	sidr := &cm.SIDRError{Addr: netip.MustParseAddrPort("10.0.0.2:4791"), Port: 7174,
		Status: mad.SIDRUnsupported, PrivateData: []byte{3, 4}}
	tests := []struct {
		name string
		err  error
		code string
		is   error
	}{
		{"closed", fmt.Errorf("accept: %w", cm.ErrClosed), "ECLOSED", cm.ErrClosed},
		{"refused", cm.ErrConnRefused, "ECONNREFUSED", cm.ErrConnRefused},
		{"timed out", cm.ErrTimedOut, "ETIMEDOUT", cm.ErrTimedOut},
		{"reset", cm.ErrConnReset, "ECONNRESET", cm.ErrConnReset},
		{"overflow", qp.ErrOverflow, "EOVERFLOW", qp.ErrOverflow},
		{"invalid", fmt.Errorf("no QP with handle 3: %w", mr.ErrInvalid), "EINVAL", mr.ErrInvalid},
		{"busy", mr.ErrBusy, "EBUSY", mr.ErrBusy},
		{"no memory", mr.ErrNoMem, "ENOMEM", mr.ErrNoMem},
		{"again", mr.ErrAgain, "EAGAIN", mr.ErrAgain},
		{"not supported", mr.ErrNotSupported, "EOPNOTSUPP", mr.ErrNotSupported},
		{"fault", mr.ErrFault, "EFAULT", mr.ErrFault},
		{"access", fmt.Errorf("uid 65534 may not use this daemon: %w", ErrAccess), "EACCES", ErrAccess},
		{"no key", mr.ErrNoKey, "FI_ENOKEY", mr.ErrNoKey},
		{"key rejected", mr.ErrKeyRejected, "FI_EKEYREJECTED", mr.ErrKeyRejected},
		{"canceled", context.Canceled, "ECANCELED", context.Canceled},
		{"deadline", context.DeadlineExceeded, "EDEADLINE", context.DeadlineExceeded},
		{"version", fmt.Errorf("attach: %w", &VersionError{Daemon: 2, Client: 0}), "EPROTONOSUPPORT", ErrProtoNotSupported},
		{"protocol not supported", ErrProtoNotSupported, "EPROTONOSUPPORT", ErrProtoNotSupported},
		{"reject", fmt.Errorf("dial: %w", rej), "REJ", cm.ErrConnRefused},
		{"QP error", &cm.QPError{QPN: 0x12, Status: verbs.RetryExcErr}, "QPERR", cm.ErrTimedOut},
		{"SIDR refused", fmt.Errorf("resolve: %w", sidr), "SIDR", cm.ErrConnRefused},
		{"other", errors.New("something else"), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := roundTrip(t, tt.err)
			if m.Code != tt.code {
				t.Errorf("code %q, want %q", m.Code, tt.code)
			}
			if err == nil || err.Error() != tt.err.Error() {
				t.Fatalf("error %v, want the text %q", err, tt.err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) is false", err, tt.is)
			}
		})
	}
	_, err := roundTrip(t, rej)
	var gotRej *cm.RejectError
	if !errors.As(err, &gotRej) || gotRej.Port != rej.Port || gotRej.Reason != rej.Reason || string(gotRej.PrivateData) != string(rej.PrivateData) {
		t.Errorf("REJ across the socket: %#v, want %#v", gotRej, rej)
	}
	_, err = roundTrip(t, sidr)
	var gotSIDR *cm.SIDRError
	if !errors.As(err, &gotSIDR) || gotSIDR.Port != sidr.Port || gotSIDR.Status != sidr.Status || string(gotSIDR.PrivateData) != string(sidr.PrivateData) {
		t.Errorf("SIDR_REP across the socket: %#v, want %#v", gotSIDR, sidr)
	}
	_, err = roundTrip(t, &cm.QPError{QPN: 0x12, Status: verbs.RetryExcErr})
	var gotQP *cm.QPError
	if !errors.As(err, &gotQP) || gotQP.QPN != 0x12 || gotQP.Status != verbs.RetryExcErr {
		t.Errorf("QP error across the socket: %#v", gotQP)
	}
	if (&Msg{}).Err() != nil {
		t.Error("a message without an error has one")
	}
}

// TestWithDefaults: both sides size a QP's rings from the same numbers.
func TestWithDefaults(t *testing.T) {
	got := QPConfig{SendCQ: 3}.WithDefaults()
	want := QPConfig{Type: verbs.RC, SendCQ: 3, RecvCQ: 3, MaxSendWR: qp.DefaultMaxWR, MaxRecvWR: qp.DefaultMaxWR,
		MaxSendSGE: qp.DefaultMaxSGE, MaxRecvSGE: qp.DefaultMaxSGE, MaxInline: qp.DefaultMaxInline}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	set := QPConfig{Type: verbs.UD, SendCQ: 3, RecvCQ: 4, MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInline: 5}
	if got := set.WithDefaults(); got != set {
		t.Errorf("defaults changed %+v into %+v", set, got)
	}
}

// FuzzMsg: whatever line a peer sends, decoding it and rebuilding its
// error neither panics nor loses the error's text or code.
func FuzzMsg(f *testing.F) {
	for _, err := range []error{cm.ErrClosed, &cm.RejectError{Port: 1}, &cm.QPError{QPN: 1}, &VersionError{Daemon: 2, Client: 3}, errors.New("x")} {
		var m Msg
		m.SetError(err)
		line, _ := json.Marshal(&m)
		f.Add(line)
	}
	f.Add([]byte(`{"id":1,"code":"REJ","error":"e","detail":"not an object"}`))
	f.Add([]byte(`{"op":"conn_ended","args":{"H":3},"code":"QPERR","error":"e","detail":{"QPN":"x"}}`))
	f.Add([]byte(`{"code":"EPROTONOSUPPORT","error":"e","detail":{"Daemon":"x"}}`))
	f.Add([]byte(`{"code":"EPROTONOSUPPORT","error":"e"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var m Msg
		if json.Unmarshal(line, &m) != nil {
			return
		}
		err := m.Err()
		if (err == nil) != (m.Error == "") {
			t.Fatalf("error %v from a message whose error is %q", err, m.Error)
		}
		if err == nil {
			return
		}
		if err.Error() != m.Error {
			t.Fatalf("error text %q, want %q", err.Error(), m.Error)
		}
		var again Msg
		again.SetError(err)
		if again.Error != m.Error {
			t.Fatalf("error text %q described again as %q", m.Error, again.Error)
		}
	})
}

// TestAttachLine: the attach line a client of each version sends, and
// what the daemon makes of the lines clients send.
func TestAttachLine(t *testing.T) {
	if got, want := string(AttachLine(Version)), fmt.Sprintf(`{"cmd":"attach","version":%d}`, Version); got != want {
		t.Errorf("this client's attach line %s, want %s", got, want)
	}
	tests := []struct {
		name    string
		line    string
		version int   // what ParseAttachLine finds
		parse   error // what ParseAttachLine returns
		check   error // what CheckVersion(Version, version) returns
	}{
		{"this version", string(AttachLine(Version)) + "\n", Version, nil, nil},
		{"without its newline", string(AttachLine(Version)), Version, nil, nil},
		{"a later version", string(AttachLine(Version+1)) + "\n", Version + 1, nil, ErrProtoNotSupported},
		{"version 1", `{"cmd":"attach","version":1}` + "\n", 1, nil, ErrProtoNotSupported},
		{"no version: a client of before versions", `{"cmd":"attach"}` + "\n", 0, nil, ErrProtoNotSupported},
		{"a negative version", `{"cmd":"attach","version":-2}`, -2, nil, ErrProtoNotSupported},
		{"fields of a later version", `{"version":2,"cmd":"attach","zerocopy":true}`, 2, nil, nil},
		{"another command", `{"cmd":"stat"}` + "\n", 0, mr.ErrInvalid, nil},
		{"no command", `{"version":2}`, 0, mr.ErrInvalid, nil},
		{"a version that is no number", `{"cmd":"attach","version":"2"}`, 0, mr.ErrInvalid, nil},
		{"a version past int", `{"cmd":"attach","version":1e40}`, 0, mr.ErrInvalid, nil},
		{"not JSON", "attach\n", 0, mr.ErrInvalid, nil},
		{"empty", "", 0, mr.ErrInvalid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseAttachLine([]byte(tt.line))
			if !errors.Is(err, tt.parse) || (err == nil) != (tt.parse == nil) {
				t.Fatalf("ParseAttachLine(%q): %v, want %v", tt.line, err, tt.parse)
			}
			if err != nil {
				return
			}
			if r.Version != tt.version {
				t.Errorf("version %d, want %d", r.Version, tt.version)
			}
			err = CheckVersion(Version, r.Version)
			if !errors.Is(err, tt.check) || (err == nil) != (tt.check == nil) {
				t.Fatalf("CheckVersion(%d, %d): %v, want %v", Version, r.Version, err, tt.check)
			}
			var ver *VersionError
			if err != nil && (!errors.As(err, &ver) || ver.Daemon != Version || ver.Client != tt.version) {
				t.Errorf("CheckVersion(%d, %d): %#v, want a VersionError of both", Version, r.Version, err)
			}
		})
	}
}

// TestVersionErrorNamesBoth: a version mismatch names the daemon's
// version and the client's, either side's absent one as such, from either
// side, and crosses the socket whole: a client of a later version reads
// the daemon's version from it, and one of an earlier release reads its
// text.
func TestVersionErrorNamesBoth(t *testing.T) {
	tests := []struct {
		daemon, client int
		want           string
	}{
		{2, 3, "the daemon speaks attach protocol 2, the library 3: use a library and a daemon of one release: protocol not supported (EPROTONOSUPPORT)"},
		{3, 2, "the daemon speaks attach protocol 3, the library 2: use a library and a daemon of one release: protocol not supported (EPROTONOSUPPORT)"},
		{2, 0, "the daemon speaks attach protocol 2, the library none (a release before protocol versions): use a library and a daemon of one release: protocol not supported (EPROTONOSUPPORT)"},
		{0, 2, "the daemon speaks attach protocol none (a release before protocol versions), the library 2: use a library and a daemon of one release: protocol not supported (EPROTONOSUPPORT)"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("daemon %d client %d", tt.daemon, tt.client), func(t *testing.T) {
			err := fmt.Errorf("attach: %w", &VersionError{Daemon: tt.daemon, Client: tt.client})
			if got := err.Error(); got != "attach: "+tt.want {
				t.Errorf("text %q, want %q", got, "attach: "+tt.want)
			}
			m, got := roundTrip(t, err)
			if m.Code != "EPROTONOSUPPORT" {
				t.Errorf("code %q, want EPROTONOSUPPORT", m.Code)
			}
			var ver *VersionError
			if !errors.Is(got, ErrProtoNotSupported) || !errors.As(got, &ver) || *ver != (VersionError{tt.daemon, tt.client}) {
				t.Errorf("across the socket: %#v, want errors.Is ErrProtoNotSupported and a VersionError{%d, %d}", got, tt.daemon, tt.client)
			}
		})
	}
	if err := CheckVersion(Version, Version); err != nil {
		t.Errorf("CheckVersion of this version: %v", err)
	}
}

// FuzzAttachLine: whatever first line a client sends, the daemon decodes
// it without panicking, finds the attach command only where the line
// names it, and accepts exactly the version it speaks; the line a client
// of the version found would send decodes to the same.
func FuzzAttachLine(f *testing.F) {
	f.Add([]byte(string(AttachLine(Version)) + "\n"))
	f.Add([]byte(`{"cmd":"attach"}`))
	f.Add([]byte(`{"cmd":"attach","version":3}`))
	f.Add([]byte(`{"cmd":"attach","version":null}`))
	f.Add([]byte(`{"cmd":"attach","Version":2,"cmd":"stat"}`))
	f.Add([]byte(`{"cmd":"info"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseAttachLine(line)
		if err != nil {
			if !errors.Is(err, mr.ErrInvalid) {
				t.Fatalf("ParseAttachLine(%q): %v, not EINVAL", line, err)
			}
			return
		}
		if r.Cmd != CmdAttach {
			t.Fatalf("ParseAttachLine(%q) took the command %q for attach", line, r.Cmd)
		}
		if err := CheckVersion(Version, r.Version); (err == nil) != (r.Version == Version) || (err != nil && !errors.Is(err, ErrProtoNotSupported)) {
			t.Fatalf("CheckVersion of version %d: %v", r.Version, err)
		}
		again, err := ParseAttachLine(AttachLine(r.Version))
		if err != nil || again != r {
			t.Fatalf("the line of version %d decodes to %+v, %v; want %+v", r.Version, again, err, r)
		}
	})
}
