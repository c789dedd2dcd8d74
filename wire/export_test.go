package wire

// The test helpers that the external tests (package wire_test) share with
// the internal ones.
var (
	ValidOpCodes  = validOpCodes
	EncodeSample  = encodeSample
	IsDecodeError = isDecodeError
)
