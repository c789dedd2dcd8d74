//go:build !unix

package control

import "os"

// fileOwner tells no owner where files have no uid (Windows): CheckDir
// then refuses the directory, as it cannot tell it is the user's alone.
func fileOwner(os.FileInfo) (int, bool) { return -1, false }
