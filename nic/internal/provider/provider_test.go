package provider

import (
	"context"
	"errors"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
)

// Users: a CQ or SRQ used by a QP cannot be destroyed (EBUSY), nor used
// once destroyed (EINVAL); destroying it twice is no error, and only the
// first call reports that it destroyed it.
func TestUsers(t *testing.T) {
	for _, tc := range []struct {
		name              string
		adds, dones       int
		wantErr           error
		wantDid, wantGone bool
	}{
		{"unused", 0, 0, nil, true, true},
		{"used by one QP", 1, 0, mr.ErrBusy, false, false},
		{"used by two QPs", 2, 0, mr.ErrBusy, false, false},
		{"used and released", 2, 2, nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u Users
			for range tc.adds {
				if err := u.Add("CQ"); err != nil {
					t.Fatalf("Add: %v", err)
				}
			}
			for range tc.dones {
				u.Done()
			}
			did, err := u.Destroy("CQ")
			if did != tc.wantDid || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Destroy: %v, %v; want %v, %v", did, err, tc.wantDid, tc.wantErr)
			}
			if u.Gone() != tc.wantGone {
				t.Fatalf("Gone: %v, want %v", u.Gone(), tc.wantGone)
			}
			if !tc.wantGone {
				return
			}
			if err := u.Add("CQ"); !errors.Is(err, mr.ErrInvalid) {
				t.Errorf("Add after Destroy: %v, want EINVAL", err)
			}
			if did, err := u.Destroy("CQ"); did || err != nil {
				t.Errorf("Destroy again: %v, %v; want false, nil", did, err)
			}
		})
	}
}

// CQState.Sleep ends with a Signal (one sent before it counts), the end of
// its context, the device closing, or the CQ retired; a CQ that a QP uses
// is not retired.
func TestCQStateSleep(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name    string
		prepare func(s *CQState) (context.Context, <-chan struct{})
		want    error
	}{
		{"signalled", func(s *CQState) (context.Context, <-chan struct{}) {
			s.Signal()
			s.Signal() // a second one before the sleep is the same wakeup
			return context.Background(), nil
		}, nil},
		{"context ended", func(*CQState) (context.Context, <-chan struct{}) { return cancelled, nil }, context.Canceled},
		{"device closed", func(*CQState) (context.Context, <-chan struct{}) { return context.Background(), closed }, cm.ErrClosed},
		{"retired", func(s *CQState) (context.Context, <-chan struct{}) {
			if err := s.Retire(); err != nil {
				t.Fatalf("Retire: %v", err)
			}
			return context.Background(), nil
		}, cm.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewCQState()
			ctx, done := tc.prepare(s)
			if err := s.Sleep(ctx, done); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Sleep: %v, want %v", err, tc.want)
			}
		})
	}

	s := NewCQState()
	if err := s.Users.Add("CQ"); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(); !errors.Is(err, mr.ErrBusy) {
		t.Fatalf("Retire of a CQ in use: %v, want EBUSY", err)
	}
	s.Signal()
	if err := s.Sleep(context.Background(), nil); err != nil {
		t.Errorf("Sleep on a CQ in use, signalled: %v; the CQ was retired", err)
	}
}
