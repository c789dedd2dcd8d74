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
		{"reject", fmt.Errorf("dial: %w", rej), "REJ", cm.ErrConnRefused},
		{"QP error", &cm.QPError{QPN: 0x12, Status: verbs.RetryExcErr}, "QPERR", cm.ErrTimedOut},
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
	for _, err := range []error{cm.ErrClosed, &cm.RejectError{Port: 1}, &cm.QPError{QPN: 1}, errors.New("x")} {
		var m Msg
		m.SetError(err)
		line, _ := json.Marshal(&m)
		f.Add(line)
	}
	f.Add([]byte(`{"id":1,"code":"REJ","error":"e","detail":"not an object"}`))
	f.Add([]byte(`{"op":"conn_ended","args":{"H":3},"code":"QPERR","error":"e","detail":{"QPN":"x"}}`))
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
