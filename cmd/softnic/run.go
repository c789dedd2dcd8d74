package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/softnic/softnic/cmd/softnic/internal/exit"
	"github.com/softnic/softnic/nic"
)

// envLibDir names the directory of libsoftnic (cmd/libsoftnic/build.sh
// DIR) when it is not next to the softnic executable.
const envLibDir = "SOFTNIC_LIB"

// defineRun is softnic run: an RDMA program built for libibverbs and
// librdmacm runs on the daemon, its libraries replaced by libsoftnic
// through LD_LIBRARY_PATH, the daemon named by SOFTNIC_SOCKET.
func defineRun(fs *flag.FlagSet) func(inv *invocation) error {
	control := fs.String("control", defaultControlPath(), "the daemon's control socket `PATH` (softnic serve --control)")
	lib := fs.String("lib", "", "the `DIR` libsoftnic was built into (cmd/libsoftnic/build.sh DIR); default $SOFTNIC_LIB, else libsoftnic next to the softnic executable")
	return func(inv *invocation) error {
		if err := inv.parse(1, -1); err != nil {
			return err
		}
		dir, err := libDir(*lib)
		if err != nil {
			return err
		}
		prog, err := exec.LookPath(inv.args[0])
		if err != nil {
			return usagef("%v", err)
		}
		env := append(os.Environ(), nic.EnvSocket+"="+*control, "LD_LIBRARY_PATH="+joinPath(dir, os.Getenv("LD_LIBRARY_PATH")))
		// The program replaces softnic: its exit status is softnic run's.
		return syscall.Exec(prog, inv.args, env)
	}
}

// libDir finds the directory holding libsoftnic's libibverbs.so.1.
func libDir(flagDir string) (string, error) {
	var tried []string
	for _, d := range []string{flagDir, os.Getenv(envLibDir), besideExecutable()} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "libibverbs.so.1")); err == nil {
			return filepath.Abs(d)
		}
		tried = append(tried, d)
	}
	return "", exit.Status(1, fmt.Errorf("no libsoftnic in %v: build it with cmd/libsoftnic/build.sh DIR (from the source tree), then name DIR with --lib or %s", tried, envLibDir))
}

// besideExecutable is the libsoftnic directory next to the running softnic.
func besideExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return filepath.Join(filepath.Dir(exe), "libsoftnic")
}

// joinPath puts dir first in a search path.
func joinPath(dir, path string) string {
	if path == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + path
}
