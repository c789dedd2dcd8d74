package verbs_test

import (
	"fmt"

	"github.com/softnic/softnic/verbs"
)

// A completion's status prints as libibverbs names it, and Text says what
// ibv_wc_status_str says of it.
func ExampleWCStatus() {
	s := verbs.RemAccessErr
	fmt.Println(s, "-", s.Text())
	// Output: REM_ACCESS_ERR - remote access error
}

// TransitionMasks tells what a modify-QP call must set to move a QP from
// one state to another.
func ExampleTransitionMasks() {
	req, opt, ok := verbs.TransitionMasks(verbs.RC, verbs.Init, verbs.RTR)
	fmt.Println(ok)
	fmt.Println("required:", req)
	fmt.Println("optional:", opt)
	// Output:
	// true
	// required: AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN
	// optional: ACCESS_FLAGS|PKEY
}
