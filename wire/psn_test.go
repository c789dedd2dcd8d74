package wire

import "testing"

func TestPSNAdd(t *testing.T) {
	tests := []struct {
		name string
		p    PSN
		n    uint32
		want PSN
	}{
		{"zero", 5, 0, 5},
		{"simple", 5, 3, 8},
		{"wraps at 2^24", PSNMask, 1, 0},
		{"wraps past zero", 0xfffffe, 4, 2},
		{"large n", 1, 1 << 24, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Add(tt.n); got != tt.want {
				t.Errorf("%v.Add(%d) = %v, want %v", tt.p, tt.n, got, tt.want)
			}
		})
	}
}

func TestPSNSub(t *testing.T) {
	tests := []struct {
		name string
		p, q PSN
		want int32
	}{
		{"equal", 7, 7, 0},
		{"ahead", 10, 7, 3},
		{"behind", 7, 10, -3},
		{"ahead across wrap", 2, PSNMask, 3},
		{"behind across wrap", PSNMask, 2, -3},
		{"largest ahead", 1<<23 - 1, 0, 1<<23 - 1},
		{"half way is behind", 1 << 23, 0, -(1 << 23)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Sub(tt.q); got != tt.want {
				t.Errorf("%v.Sub(%v) = %d, want %d", tt.p, tt.q, got, tt.want)
			}
		})
	}
}

func TestPSNOrder(t *testing.T) {
	tests := []struct {
		name          string
		p, q          PSN
		before, after bool
	}{
		{"equal", 9, 9, false, false},
		{"less", 1, 2, true, false},
		{"greater", 2, 1, false, true},
		{"wrap: max before 0", PSNMask, 0, true, false},
		{"wrap: 0 after max", 0, PSNMask, false, true},
		{"2^23 apart: the distance is -2^23, so p is before", 0, 1 << 23, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Before(tt.q); got != tt.before {
				t.Errorf("%v.Before(%v) = %v, want %v", tt.p, tt.q, got, tt.before)
			}
			if got := tt.p.After(tt.q); got != tt.after {
				t.Errorf("%v.After(%v) = %v, want %v", tt.p, tt.q, got, tt.after)
			}
		})
	}
}

func TestPSNInWindow(t *testing.T) {
	tests := []struct {
		name  string
		p     PSN
		first PSN
		n     uint32
		want  bool
	}{
		{"first", 10, 10, 4, true},
		{"last", 13, 10, 4, true},
		{"one past", 14, 10, 4, false},
		{"one before", 9, 10, 4, false},
		{"empty window", 10, 10, 0, false},
		{"across wrap, before wrap", PSNMask, PSNMask - 1, 4, true},
		{"across wrap, after wrap", 1, PSNMask - 1, 4, true},
		{"across wrap, past end", 2, PSNMask - 1, 4, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.InWindow(tt.first, tt.n); got != tt.want {
				t.Errorf("%v.InWindow(%v, %d) = %v, want %v", tt.p, tt.first, tt.n, got, tt.want)
			}
		})
	}
}

func TestPSNString(t *testing.T) {
	tests := []struct {
		p    PSN
		want string
	}{
		{0, "0x000000"},
		{0xabc, "0x000abc"},
		{0x99f692, "0x99f692"},
		{PSNMask, "0xffffff"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("PSN(%d).String() = %q, want %q", uint32(tt.p), got, tt.want)
		}
	}
}
