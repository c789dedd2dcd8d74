package provider

import "github.com/softnic/softnic/wire/mad"

// ResolveOptions are nic.ResolveOptions, with their defaults set.
type ResolveOptions struct {
	PrivateData          []byte
	CMTimeout, CMRetries uint8
	PortSpace            mad.PortSpace
}

// Resolution is what a Resolve learnt from the SIDR_REP: the UD QP that
// serves the port, its Q_Key, and the private data.
type Resolution struct {
	QPN, QKey uint32
	Private   []byte
}
