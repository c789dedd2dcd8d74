package wire

import (
	"strings"
	"testing"
)

// Header letters for the table below, in wire order.
const (
	hR = "RETH"
	hA = "AETH"
	hT = "AtomicETH"
	hK = "AtomicAckETH"
	hI = "ImmDT"
	hV = "IETH"
	hD = "DETH"
	hF = "FETH"
)

// opcodeSpec is IBTA 9.2 Table 37 and Annex A19, written out independently of
// the package's table: the extension headers in wire order, whether a payload
// is allowed, the position in a message, and the name Wireshark shows.
var opcodeSpec = []struct {
	op      OpCode
	name    string
	headers []string
	payload bool
	pos     string // first, middle, last, only
}{
	{OpRCSendFirst, "RC Send First", nil, true, "first"},
	{OpRCSendMiddle, "RC Send Middle", nil, true, "middle"},
	{OpRCSendLast, "RC Send Last", nil, true, "last"},
	{OpRCSendLastImm, "RC Send Last Immediate", []string{hI}, true, "last"},
	{OpRCSendOnly, "RC Send Only", nil, true, "only"},
	{OpRCSendOnlyImm, "RC Send Only Immediate", []string{hI}, true, "only"},
	{OpRCWriteFirst, "RC RDMA Write First", []string{hR}, true, "first"},
	{OpRCWriteMiddle, "RC RDMA Write Middle", nil, true, "middle"},
	{OpRCWriteLast, "RC RDMA Write Last", nil, true, "last"},
	{OpRCWriteLastImm, "RC RDMA Write Last Immediate", []string{hI}, true, "last"},
	{OpRCWriteOnly, "RC RDMA Write Only", []string{hR}, true, "only"},
	{OpRCWriteOnlyImm, "RC RDMA Write Only Immediate", []string{hR, hI}, true, "only"},
	{OpRCReadRequest, "RC RDMA Read Request", []string{hR}, false, "only"},
	{OpRCReadResponseFirst, "RC RDMA Read Response First", []string{hA}, true, "first"},
	{OpRCReadResponseMiddle, "RC RDMA Read Response Middle", nil, true, "middle"},
	{OpRCReadResponseLast, "RC RDMA Read Response Last", []string{hA}, true, "last"},
	{OpRCReadResponseOnly, "RC RDMA Read Response Only", []string{hA}, true, "only"},
	{OpRCAck, "RC Acknowledge", []string{hA}, false, "only"},
	{OpRCAtomicAck, "RC Atomic Acknowledge", []string{hA, hK}, false, "only"},
	{OpRCCompareSwap, "RC Compare Swap", []string{hT}, false, "only"},
	{OpRCFetchAdd, "RC Fetch Add", []string{hT}, false, "only"},
	{OpRCSendLastInv, "RC Send Last Invalidate", []string{hV}, true, "last"},
	{OpRCSendOnlyInv, "RC Send Only Invalidate", []string{hV}, true, "only"},
	{OpRCFlush, "RC Flush", []string{hF, hR}, false, "only"},
	{OpRCAtomicWrite, "RC Atomic Write", []string{hR}, true, "only"},
	{OpUCSendFirst, "UC Send First", nil, true, "first"},
	{OpUCSendMiddle, "UC Send Middle", nil, true, "middle"},
	{OpUCSendLast, "UC Send Last", nil, true, "last"},
	{OpUCSendLastImm, "UC Send Last Immediate", []string{hI}, true, "last"},
	{OpUCSendOnly, "UC Send Only", nil, true, "only"},
	{OpUCSendOnlyImm, "UC Send Only Immediate", []string{hI}, true, "only"},
	{OpUCWriteFirst, "UC RDMA Write First", []string{hR}, true, "first"},
	{OpUCWriteMiddle, "UC RDMA Write Middle", nil, true, "middle"},
	{OpUCWriteLast, "UC RDMA Write Last", nil, true, "last"},
	{OpUCWriteLastImm, "UC RDMA Write Last Immediate", []string{hI}, true, "last"},
	{OpUCWriteOnly, "UC RDMA Write Only", []string{hR}, true, "only"},
	{OpUCWriteOnlyImm, "UC RDMA Write Only Immediate", []string{hR, hI}, true, "only"},
	{OpUDSendOnly, "UD Send Only", []string{hD}, true, "only"},
	{OpUDSendOnlyImm, "UD Send Only Immediate", []string{hD, hI}, true, "only"},
}

var headerSizes = map[string]int{
	hR: RETHSize, hA: AETHSize, hT: AtomicETHSize, hK: AtomicAckETHSize,
	hI: ImmDTSize, hV: IETHSize, hD: DETHSize, hF: FETHSize,
}

func TestOpCodeTable(t *testing.T) {
	if got, want := len(validOpCodes()), len(opcodeSpec); got != want {
		t.Errorf("%d valid opcodes, the spec table lists %d", got, want)
	}
	for _, tt := range opcodeSpec {
		t.Run(tt.name, func(t *testing.T) {
			op := tt.op
			if !op.Valid() {
				t.Fatalf("%#x not valid", uint8(op))
			}
			if got := op.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			has := map[string]bool{
				hR: op.HasRETH(), hA: op.HasAETH(), hT: op.HasAtomicETH(), hK: op.HasAtomicAckETH(),
				hI: op.HasImmDT(), hV: op.HasIETH(), hD: op.HasDETH(), hF: op.HasFETH(),
			}
			want := BTHSize
			for _, h := range tt.headers {
				if !has[h] {
					t.Errorf("Has%s() = false", h)
				}
				delete(has, h)
				want += headerSizes[h]
			}
			for h, v := range has {
				if v {
					t.Errorf("Has%s() = true", h)
				}
			}
			if got := op.HeaderLen(); got != want {
				t.Errorf("HeaderLen() = %d, want %d", got, want)
			}
			if got := op.HasPayload(); got != tt.payload {
				t.Errorf("HasPayload() = %v, want %v", got, tt.payload)
			}
			pos := map[string]bool{"first": op.IsFirst(), "middle": op.IsMiddle(), "last": op.IsLast(), "only": op.IsOnly()}
			for p, v := range pos {
				if v != (p == tt.pos) {
					t.Errorf("Is%s() = %v", p, v)
				}
			}
			wantTransport := map[string]Transport{"RC": TransportRC, "UC": TransportUC, "UD": TransportUD}[tt.name[:2]]
			if got := op.Transport(); got != wantTransport || got.String() != tt.name[:2] {
				t.Errorf("Transport() = %v, want %v", got, wantTransport)
			}
		})
	}
}

// TestHeaderOrder checks that the headers sit in the order IBTA gives, by
// encoding distinct values and finding them at the expected offsets.
func TestHeaderOrder(t *testing.T) {
	for _, tt := range opcodeSpec {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeSample(t, tt.op)
			var p Packet
			if err := p.Decode(b); err != nil {
				t.Fatal(err)
			}
			views := map[string][]byte{
				hR: p.RETH, hA: p.AETH, hT: p.AtomicETH, hK: p.AtomicAckETH,
				hI: p.ImmDT, hV: p.IETH, hD: p.DETH, hF: p.FETH,
			}
			off := BTHSize
			for _, h := range tt.headers {
				v := views[h]
				if len(v) != headerSizes[h] || &v[0] != &b[off] {
					t.Errorf("%s is not the %d bytes at offset %d", h, headerSizes[h], off)
				}
				off += headerSizes[h]
			}
		})
	}
}

func TestOpCodeClasses(t *testing.T) {
	tests := []struct {
		name string
		pred func(OpCode) bool
		want []OpCode
	}{
		{"IsReadRequest", OpCode.IsReadRequest, []OpCode{OpRCReadRequest}},
		{"IsReadResponse", OpCode.IsReadResponse, []OpCode{OpRCReadResponseFirst, OpRCReadResponseMiddle, OpRCReadResponseLast, OpRCReadResponseOnly}},
		{"IsAck", OpCode.IsAck, []OpCode{OpRCAck, OpRCAtomicAck}},
		{"IsAtomic", OpCode.IsAtomic, []OpCode{OpRCCompareSwap, OpRCFetchAdd}},
		{"IsFlush", OpCode.IsFlush, []OpCode{OpRCFlush}},
		{"IsAtomicWrite", OpCode.IsAtomicWrite, []OpCode{OpRCAtomicWrite}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := map[OpCode]bool{}
			for _, op := range tt.want {
				want[op] = true
			}
			for _, op := range validOpCodes() {
				if got := tt.pred(op); got != want[op] {
					t.Errorf("%v: %v", op, got)
				}
			}
		})
	}
	// Name-based classes: SEND and WRITE by name, requests are everything
	// but responses and acknowledgements.
	for _, op := range validOpCodes() {
		name := op.String()
		if got, want := op.IsSend(), strings.Contains(name, " Send "); got != want {
			t.Errorf("%v: IsSend() = %v", op, got)
		}
		if got, want := op.IsWrite(), strings.Contains(name, " RDMA Write "); got != want {
			t.Errorf("%v: IsWrite() = %v", op, got)
		}
		if got, want := op.IsRequest(), !op.IsAck() && !op.IsReadResponse(); got != want {
			t.Errorf("%v: IsRequest() = %v", op, got)
		}
	}
}

func TestOpCodeInvalid(t *testing.T) {
	for _, op := range []OpCode{0x15, 0x18, 0x1B, 0x1E, 0x2C, 0x40, 0x66, 0x80, 0x81, 0xA0, 0xFF} {
		if op.Valid() {
			t.Errorf("%#x is valid", uint8(op))
		}
		if got := op.HeaderLen(); got != 0 {
			t.Errorf("%#x: HeaderLen() = %d", uint8(op), got)
		}
		if got, want := op.String(), "Unknown (0x"+hexByte(uint8(op))+")"; got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	if got := Transport(2).String(); got != "Transport(2)" {
		t.Errorf("Transport(2).String() = %q", got)
	}
}

func hexByte(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

func TestMaxHeaderSize(t *testing.T) {
	largest := 0
	for _, op := range validOpCodes() {
		largest = max(largest, op.HeaderLen())
	}
	if largest != MaxHeaderSize {
		t.Errorf("largest HeaderLen = %d, MaxHeaderSize = %d", largest, MaxHeaderSize)
	}
}
