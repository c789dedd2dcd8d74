package nic_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// TestMRWord: an attached device's region offers its aligned words for
// watching, and a loop of atomic loads of one sees a peer's WRITE land; an
// embedded device's region offers none, nor does a word not aligned or not
// wholly in the region.
func TestMRWord(t *testing.T) {
	nictest.CheckLeaks(t)
	_, a, b := attachedToEmbedded(t)
	part, err := a.pd.RegMR(a.mr.Bytes()[1:101], mr.LocalWrite) // starts 1 byte past a page
	if err != nil {
		t.Fatal(err)
	}
	defer part.Dereg()
	n := a.mr.Len()
	tests := []struct {
		name string
		m    *nic.MR
		off  int
		want bool
	}{
		{"attached, first word", a.mr, 0, true},
		{"attached, last word", a.mr, n - 4, true},
		{"attached, unaligned", a.mr, 2, false},
		{"attached, past the end", a.mr, n - 3, false},
		{"attached, negative", a.mr, -4, false},
		{"attached part, aligned address", part, 3, true},
		{"attached part, unaligned address", part, 0, false},
		{"attached part, past the end", part, 99, false},
		{"embedded", b.mr, 0, false},
	}
	for _, tt := range tests {
		if got := tt.m.Word(tt.off) != nil; got != tt.want {
			t.Errorf("%s: Word(%d) offered %v, want %v", tt.name, tt.off, got, tt.want)
		}
	}

	// The embedded end WRITEs 8 bytes, the last 0x5c, at offset 64 of the
	// attached end's region, which watches the word of its last byte.
	w := a.mr.Word(68)
	src := b.mr.Bytes()[:8]
	binary.LittleEndian.PutUint64(src, 0x5c00_0000_0000_0000)
	wr := verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, RemoteAddr: a.mr.Addr() + 64, RKey: a.mr.RKey(),
		SGL: []verbs.SGE{b.mr.SGE(0, 8)}}
	if err := b.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	var wb [4]byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		binary.NativeEndian.PutUint32(wb[:], w.Load())
		if wb[3] == 0x5c {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WRITE's last byte is not seen in 10 s: the word holds %#x", wb)
		}
	}
	var wc [1]verbs.WC
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != verbs.Success {
		t.Fatalf("the WRITE's completion: %v, %v", err, wc[0].Status)
	}
}
