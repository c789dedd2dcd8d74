package fabric_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
)

var loopback = netip.MustParseAddrPort("127.0.0.1:0")

// openDescriptors lists what the process's open descriptors refer to: an
// attached device's and, the daemon running in the test, its daemon's;
// but for two kinds a device opens and closes by itself, whatever its
// endpoints, as its traffic changes, and which no endpoint makes:
//   - epoll instances: besides the runtime's, a UDP socket's registration
//     in the netpoller (package udp's waiter), made when a reader waits
//     for the socket and closed when an application polls it;
//   - duplicates of an eventfd, which count once, told apart by the id in
//     their fdinfo (all eventfds have one target): the daemon's doorbell
//     goroutine holds one of the process's doorbell eventfd while it
//     waits for signals, made at its first wait, which can come after a
//     test's first look on a busy machine, and closed while the doorbell
//     is throttled.
//
// Whatever an endpoint opens, its CQ's new eventfd on both sides and its
// ring's memfd, counts.
func openDescriptors(t *testing.T) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no descriptor list: %v", err)
	}
	var open []string
	eventfds := make(map[string]bool)
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + fd.Name())
		switch {
		case err != nil: // ReadDir's own, closed by now
			continue
		case target == "anon_inode:[eventpoll]":
			continue
		}
		if id := eventfdID(fd.Name()); id != "" {
			if eventfds[id] {
				continue
			}
			eventfds[id] = true
			target += " " + id
		}
		open = append(open, target)
	}
	return open
}

// eventfdID returns the "eventfd-id: N" line of the descriptor fd's
// fdinfo, empty if fd is not an eventfd or the kernel does not say.
func eventfdID(fd string) string {
	info, err := os.ReadFile("/proc/self/fdinfo/" + fd)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(info)) {
		if strings.HasPrefix(line, "eventfd-id:") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return ""
}

// descriptorsLeft returns the descriptors open beyond the before's count
// (those whose targets were not open before), waiting up to 5 s for the
// count to fall back: a daemon in the test closes an object's descriptors
// after it answered the verb that destroyed it.
func descriptorsLeft(t *testing.T, before []string) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		now := openDescriptors(t)
		if len(now) <= len(before) {
			return nil
		}
		if time.Now().After(deadline) {
			was := make(map[string]int, len(before))
			for _, target := range before {
				was[target]++
			}
			var left []string
			for _, target := range now {
				if was[target] > 0 {
					was[target]--
				} else {
					left = append(left, target)
				}
			}
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// end is a verbs peer of the endpoints under test: a device with a PD, a
// CQ, a registered 1 MiB buffer and one RC QP.
type end struct {
	dev *nic.Device
	cq  *nic.CQ
	mr  *nic.MR
	qp  *nic.QP
}

func openEnd(t testing.TB, cfg nic.Config) *end {
	t.Helper()
	e := &end{dev: nictest.OpenDevice(t, cfg)}
	pd, err := e.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = pd.RegMR(make([]byte, 1<<20), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = pd.CreateQP(nic.QPConfig{SendCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	return e
}
