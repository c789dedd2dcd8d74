//go:build linux

package tests

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/bystander"
	"github.com/softnic/softnic/nic/shm"
)

// A hostile process speaks the attach protocol itself, with no library
// between it and the daemon: it sends what it likes and writes what it
// likes into the memory it shares with the daemon.

// rawSession is an attach session driven a line at a time.
type rawSession struct {
	c    *shm.Conn
	bell int          // the doorbell eventfd
	page *shm.Mapping // the doorbell page
	next uint64
}

// rawAttach attaches to the daemon at control.
func rawAttach(control string) (*rawSession, error) {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: control, Net: "unix"})
	if err != nil {
		return nil, err
	}
	s := &rawSession{c: shm.NewConn(uc, 64<<10)}
	if err := s.c.Send([]byte(`{"cmd":"attach","version":2}`), nil); err != nil { // protocol 2: attachproto.Version, bump with it
		s.c.Close()
		return nil, err
	}
	fds, err := s.read(0, nil)
	if err == nil && len(fds) != 2 {
		shm.CloseFDs(fds)
		err = fmt.Errorf("%d descriptors with the attach answer, want 2", len(fds))
	}
	if err != nil {
		s.c.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	s.bell = fds[0]
	if s.page, err = shm.Map(fds[1], shm.DoorbellSize); err != nil {
		unix.Close(s.bell)
		s.c.Close()
		return nil, err
	}
	return s, nil
}

// call sends request op with args and decodes the answer's result into
// res; it returns the descriptors the answer carried.
func (s *rawSession) call(op string, args any, res any) ([]int, error) {
	if err := s.send(op, args, nil); err != nil {
		return nil, err
	}
	return s.read(s.next, res)
}

// send sends request op with args and the descriptors fds, numbered
// s.next, without waiting for its answer.
func (s *rawSession) send(op string, args any, fds []int) error {
	s.next++
	a, _ := json.Marshal(args)
	line, _ := json.Marshal(map[string]any{"id": s.next, "op": op, "args": json.RawMessage(a), "fds": len(fds)})
	return s.c.Send(line, fds)
}

// read reads messages until the answer to call id, skipping events.
func (s *rawSession) read(id uint64, res any) ([]int, error) {
	for {
		line, err := s.c.ReadLine()
		if err != nil {
			return nil, err
		}
		var m struct {
			ID     uint64
			FDs    int
			Result json.RawMessage
			Error  string
		}
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		fds, err := s.c.TakeFDs(m.FDs)
		if err != nil {
			return nil, err
		}
		switch {
		case m.ID != id:
			shm.CloseFDs(fds)
		case m.Error != "":
			shm.CloseFDs(fds)
			return nil, errors.New(m.Error)
		case res != nil && json.Unmarshal(m.Result, res) != nil:
			shm.CloseFDs(fds)
			return nil, fmt.Errorf("result %s", m.Result)
		default:
			return fds, nil
		}
	}
}

// pdAndCQ allocates a PD and creates a CQ of 4 entries, whose ring's
// descriptors it closes, and returns their handles.
func (s *rawSession) pdAndCQ() (pd, cq uint32, err error) {
	var r struct{ H uint32 }
	if _, err := s.call("alloc_pd", nil, &r); err != nil {
		return 0, 0, err
	}
	pd = r.H
	fds, err := s.call("create_cq", map[string]int{"Depth": 4}, &r)
	if err != nil {
		return 0, 0, err
	}
	shm.CloseFDs(fds)
	return pd, r.H, nil
}

// qps creates n RC QPs in a PD and on a CQ of their own, and closes their
// rings' descriptors (their rings are then the daemon's alone).
func (s *rawSession) qps(n int) error {
	pd, cq, err := s.pdAndCQ()
	if err != nil {
		return err
	}
	for range n {
		fds, err := s.call("create_qp", map[string]any{"PD": pd, "Config": map[string]any{"SendCQ": cq, "MaxSendWR": 4, "MaxRecvWR": 4}}, nil)
		if err != nil {
			return err
		}
		shm.CloseFDs(fds)
	}
	return nil
}

// Close detaches.
func (s *rawSession) Close() {
	unix.Close(s.bell)
	s.page.Close()
	s.c.Close()
}

// envAttack is set in the attacker processes (TestAttacker) to the attack
// they make; envAttackSocket to the daemon's control socket;
// envAttackVictim, for an attack on another process's QP, to its number.
const (
	envAttack       = "SOFTNIC_TEST_ATTACK"
	envAttackSocket = "SOFTNIC_TEST_ATTACK_SOCKET"
	envAttackVictim = "SOFTNIC_TEST_ATTACK_VICTIM"
)

// attacks are what an attacker process can do, by name: each sets itself
// up on the daemon at control and returns one step of its attack, which
// the attacker repeats while attacking.
var attacks = map[string]func(control string) (step func() error, err error){
	"doorbell-signals": doorbellFlood(false),
	"doorbell-marks":   doorbellFlood(true),
	"sessions":         sessionsFlood,
	"attach-loop":      attachLoop,
	"qps":              qpsFlood,
	"mappings":         mappingsFlood,
	"waits":            waitsFlood,
	"hijack":           hijack,
	"control-flood":    controlFlood,
}

// TestAttacker is not a test of its own: it is the body of the attacker
// processes of the attack tests (this test binary run again with
// -test.run=^TestAttacker$), which make the attack SOFTNIC_TEST_ATTACK
// names on the daemon at SOFTNIC_TEST_ATTACK_SOCKET (bystander.RunAttacker).
func TestAttacker(t *testing.T) {
	setup := attacks[os.Getenv(envAttack)]
	if setup == nil {
		t.Skip("run by the attack tests as an attacker process")
	}
	step, err := setup(os.Getenv(envAttackSocket))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	bystander.RunAttacker(step)
}

// startAttacker starts an attacker process set up to make attack on the
// daemon at control, idle (spinning) until told to attack. It is killed
// when the test ends.
func startAttacker(t testing.TB, attack, control string) *bystander.Attacker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttacker$")
	cmd.Env = append(os.Environ(), envAttack+"="+attack, envAttackSocket+"="+control)
	return bystander.StartAttacker(t, cmd)
}

// floodQPs is how many QPs a doorbell flooder owns.
const floodQPs = 64

// doorbellFlood returns an attack that attaches, makes floodQPs QPs, and
// signals its doorbell eventfd at each step without posting anything;
// with marks, its doorbell page says each time that every one of its QPs
// rang (slots 0 to floodQPs-1: the daemon hands out the lowest free).
func doorbellFlood(marks bool) func(control string) (func() error, error) {
	return func(control string) (func() error, error) {
		s, err := rawAttach(control)
		if err != nil {
			return nil, err
		}
		if err := s.qps(floodQPs); err != nil {
			return nil, err
		}
		bell, err := shm.NewDoorbell(s.page.Bytes())
		if err != nil {
			return nil, err
		}
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		return func() error {
			if marks {
				for slot := range uint32(floodQPs) {
					bell.Mark(slot)
				}
			}
			if _, err := unix.Write(s.bell, one[:]); err != nil && err != unix.EAGAIN {
				return err
			}
			return nil
		}, nil
	}
}
