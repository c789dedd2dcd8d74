package verbs

import "strings"

var attrMaskNames = [...]string{
	"STATE", "ACCESS_FLAGS", "PKEY", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT",
	"RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "DEST_QPN",
}

// String lists the attributes in the mask by their ibv_qp_attr_mask names.
func (m AttrMask) String() string {
	var names []string
	for i, n := range attrMaskNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, "|")
}

// TransitionMasks returns the attributes a transition of a QP of type t
// requires and those it may also take, following the modify-QP table of
// the IBTA (as libibverbs and the kernel's ib_modify_qp_is_ok encode it; the
// port and P_Key index attributes have no meaning on a softnic device).
func TransitionMasks(t Type, from, to State) (required, optional AttrMask, ok bool) {
	connected := t == RC || t == UC
	switch {
	case to == Reset || to == Err && from != Reset:
		// Every state may be reset or fail; a QP in RESET has nothing
		// to flush and goes to ERR only through INIT (as Linux's table).
		return 0, 0, true
	case from == Reset && to == Init:
		if connected {
			return AttrAccessFlags, AttrPKey, true
		}
		return AttrQKey, AttrPKey, true
	case from == Init && to == Init:
		if connected {
			return 0, AttrAccessFlags | AttrPKey, true
		}
		return 0, AttrQKey | AttrPKey, true
	case from == Init && to == RTR:
		switch t {
		case RC:
			return AttrRemote | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
				AttrAccessFlags | AttrPKey, true
		case UC:
			return AttrRemote | AttrPathMTU | AttrDestQPN | AttrRQPSN, AttrAccessFlags | AttrPKey, true
		}
		// A UD path MTU is softnic's: it bounds a UD message (4096 without it).
		return 0, AttrQKey | AttrPKey | AttrPathMTU, true
	case from == RTR && to == RTS:
		switch t {
		case RC:
			return AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic,
				AttrAccessFlags | AttrMinRNRTimer, true
		case UC:
			return AttrSQPSN, AttrAccessFlags, true
		}
		return AttrSQPSN, AttrQKey, true
	case from == RTS && to == SQD:
		return 0, 0, true
	case (from == RTS || from == SQD) && to == RTS:
		switch t {
		case RC:
			return 0, AttrAccessFlags | AttrMinRNRTimer, true
		case UC:
			return 0, AttrAccessFlags, true
		}
		return 0, AttrQKey, true
	case from == SQD && to == SQD:
		// The retry attributes change only while the send queue is
		// drained. The IBTA also allows the address vector, P_Key and
		// the RD/ATOMIC limits here; softnic does not change those.
		switch t {
		case RC:
			return 0, AttrAccessFlags | AttrMinRNRTimer | AttrTimeout | AttrRetryCnt | AttrRNRRetry, true
		case UC:
			return 0, AttrAccessFlags, true
		}
		return 0, AttrQKey, true
	case from == SQE && to == RTS && !(t == RC):
		if t == UC {
			return 0, AttrAccessFlags, true
		}
		return 0, AttrQKey, true
	}
	return 0, 0, false
}
