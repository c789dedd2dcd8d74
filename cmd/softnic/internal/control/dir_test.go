package control

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/softnic/softnic/nic"
)

// TestCheckControlDir: without a runtime directory the default control
// socket lives in a directory serve makes for its user alone; a directory
// at that path that others can write, or a symlink, is refused by serve
// and by the inspecting commands alike.
func TestCheckControlDir(t *testing.T) {
	for _, tt := range []struct {
		name    string
		prepare func(dir string) error
		create  bool
		ok      bool
	}{
		{"serve makes it", func(string) error { return nil }, true, true},
		{"missing, for the inspecting commands", func(string) error { return nil }, false, false},
		{"the user's, 0700", func(dir string) error { return os.Mkdir(dir, 0o700) }, false, true},
		{"writable by others", func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o777)
		}, true, false},
		{"a symlink to a directory", func(dir string) error {
			target := dir + ".target"
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			return os.Symlink(target, dir)
		}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir())
			dir := nic.PrivateSocketDir()
			if err := tt.prepare(dir); err != nil {
				t.Fatal(err)
			}
			err := CheckDir(filepath.Join(dir, "softnic.sock"), tt.create)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckDir: %v, want ok=%v", err, tt.ok)
			}
			if tt.create && tt.ok {
				if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Errorf("made %v, %v; want a 0700 directory", fi.Mode(), err)
				}
			}
		})
	}
	if err := CheckDir("/somewhere/else.sock", false); err != nil {
		t.Errorf("a path of the user's choice: %v", err)
	}
}
