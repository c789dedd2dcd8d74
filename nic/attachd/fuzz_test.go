package attachd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
)

// FuzzAttachRequests sends arbitrary request lines to a daemon on its
// attach socket, as a buggy or hostile process could: the daemon answers
// or drops the process, and goes on serving others. Requests to dial are
// left out: their addresses could leave loopback.
func FuzzAttachRequests(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"op":"alloc_pd"}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"create_cq","args":{"Depth":4}}` + "\n" +
			`{"id":3,"op":"create_qp","args":{"PD":1,"Config":{"SendCQ":2,"MaxSendWR":4}}}` + "\n" +
			`{"id":4,"op":"modify_qp","args":{"H":3,"Attr":{"State":1},"Mask":1}}` + "\n" + `{"id":5,"op":"destroy_qp","args":{"H":3}}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"create_srq","args":{"PD":1,"Depth":2,"MaxSGE":1}}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"reg_mr","args":{"PD":1,"Buf":1,"Off":-1,"Len":8}}`,
		`{"id":1,"op":"alloc_mr","args":{"PD":1,"Size":4096},"fds":1}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"create_cq","args":{"Depth":4}}` + "\n" +
			`{"id":3,"op":"listen","args":{"Port":9,"PD":1,"QP":{"SendCQ":2}}}` + "\n" + `{"id":4,"op":"accept_request","args":{"H":3}}` + "\n" +
			`{"op":"cancel","args":{"Target":4}}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"create_cq","args":{"Depth":4}}` + "\n" +
			`{"id":3,"op":"create_srq","args":{"PD":1,"Depth":2,"MaxSGE":1}}` + "\n" +
			`{"id":4,"op":"create_qp","args":{"PD":1,"Config":{"SendCQ":2,"SRQ":3}}}` + "\n" +
			`{"id":5,"op":"destroy_cq","args":{"H":2}}` + "\n" + `{"id":6,"op":"destroy_srq","args":{"H":3}}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"alloc_mw","args":{"PD":1,"Type":2}}` + "\n" +
			`{"id":3,"op":"dealloc_pd","args":{"H":1}}` + "\n" + `{"id":4,"op":"dealloc_mw","args":{"H":2}}`,
		`{"id":1,"op":"alloc_pd"}` + "\n" + `{"id":2,"op":"create_cq","args":{"Depth":4}}` + "\n" +
			`{"id":3,"op":"create_qp","args":{"PD":1,"Config":{"Type":3,"SendCQ":2,"MaxSendWR":4}}}` + "\n" +
			`{"id":4,"op":"attach_mcast","args":{"H":3,"Group":"239.1.1.1"}}` + "\n" +
			`{"id":5,"op":"attach_mcast","args":{"H":3,"Group":"not an address"}}` + "\n" +
			`{"id":6,"op":"detach_mcast","args":{"H":3,"Group":"::ffff:239.1.1.1"}}` + "\n" + `{"id":7,"op":"destroy_qp","args":{"H":3}}`,
		`{"id":1,"op":"counters"}`, `{"id":7,"op":"no_such_op"}`, `{"op":"cancel","args":{"Target":99}}`, `not json`,
	} {
		f.Add([]byte(s))
	}
	_, _, path := serveTest(f, Config{Attaches: unpaced})
	f.Fuzz(func(t *testing.T, script []byte) {
		c := attachRaw(t, path)
		defer c.Close()
		for _, line := range bytes.Split(script, []byte("\n")) {
			var m attachproto.Msg
			if json.Unmarshal(line, &m) == nil && m.Op == attachproto.OpDial {
				continue
			}
			if c.Send(line, nil) != nil {
				break
			}
		}
		c.Send([]byte(`{"id":18446744073709551615,"op":"counters"}`), nil)
		c.Unix().SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			line, err := c.ReadLine()
			if err != nil {
				break // the daemon dropped a process that broke the protocol
			}
			var m attachproto.Msg
			if json.Unmarshal(line, &m) != nil {
				t.Fatalf("the daemon sent %q", line)
			}
			if fds, err := c.TakeFDs(m.FDs); err == nil {
				shm.CloseFDs(fds)
			}
			if m.ID == 1<<64-1 {
				break
			}
		}
		// Whatever happened, the daemon serves another process.
		other := attachRaw(t, path)
		other.Close()
	})
}

// attachRaw connects to the daemon at path and reads its answer to the
// attach line.
func attachRaw(t *testing.T, path string) *shm.Conn {
	t.Helper()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := shm.NewConn(uc, attachproto.MaxLine)
	fds, err := sendAttachLine(c)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	shm.CloseFDs(fds)
	return c
}

// sendAttachLine attaches as a process that speaks the protocol itself
// does: it sends the attach line on c and returns the descriptors of the
// daemon's answer, its doorbell's eventfd and page.
func sendAttachLine(c *shm.Conn) ([]int, error) {
	var m attachproto.Msg
	err := c.Send(attachproto.AttachLine(attachproto.Version), nil)
	var line []byte
	if err == nil {
		line, err = c.ReadLine()
	}
	if err == nil {
		err = json.Unmarshal(line, &m)
	}
	var fds []int
	if err == nil {
		fds, err = c.TakeFDs(m.FDs)
	}
	if err == nil {
		err = m.Err()
	}
	if err == nil && len(fds) != 2 {
		err = fmt.Errorf("%d descriptors with the attach answer, want 2", len(fds))
	}
	if err != nil {
		shm.CloseFDs(fds)
		return nil, err
	}
	return fds, nil
}
