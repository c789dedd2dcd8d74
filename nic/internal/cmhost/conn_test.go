package cmhost

import (
	"context"
	"testing"

	"github.com/softnic/softnic/mr"
)

// TestCMAccess: a connected QP grants its peer remote write, and remote
// read and atomics only when it takes READs and atomics at all (responder
// resources), as Linux's CM sets the access of the QPs it connects.
func TestCMAccess(t *testing.T) {
	for _, tc := range []struct {
		rr   uint8
		want mr.Access
	}{
		{0, mr.RemoteWrite},
		{1, mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic},
		{16, mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic},
	} {
		if got := cmAccess(tc.rr); got != tc.want {
			t.Errorf("cmAccess(%d) = %v, want %v", tc.rr, got, tc.want)
		}
	}
}

// TestCMBackoffEndsWithContext: a dial's wait before it tries again after
// a REJ "no resources" ends, reporting false, as soon as the dial's
// context has ended.
func TestCMBackoffEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if cmBackoff(ctx, 3, 20) {
		t.Error("cmBackoff with an ended context reported true")
	}
}
