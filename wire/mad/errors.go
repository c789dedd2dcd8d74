package mad

import "errors"

// Errors returned by the MAD decoders, for errors.Is.
var (
	// ErrBadMAD: a management datagram is not a CM message: wrong base
	// version, management class, class version or method.
	ErrBadMAD = errors.New("wire: not a CM MAD")
	// ErrBadAttr: a CM MAD carries an attribute softnic does not implement
	// (LAP, APR, ClassPortInfo or an unknown one).
	ErrBadAttr = errors.New("wire: unsupported CM attribute")
	// ErrBadCMAHeader: REQ private data does not start with an rdma_cm
	// header of a version and IP version softnic knows.
	ErrBadCMAHeader = errors.New("wire: bad rdma_cm private data header")
)
