// Package exit carries a command's exit status inside its error: a
// failure that is not a usage error but must not exit with the ordinary
// status 1, such as a daemon or a tool's server that cannot listen on its
// port (2). package main reports it in one line, without the usage text.
package exit

// Error is a failure with its own exit status.
type Error struct {
	Status int
	Err    error
}

// Status returns err with the exit status status.
func Status(status int, err error) error { return &Error{Status: status, Err: err} }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
