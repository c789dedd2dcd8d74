package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise
// the module version and VCS revision recorded by the go command are shown.
var version = ""

func defineVersion(*flag.FlagSet) func(*invocation) error {
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		_, err := fmt.Fprintf(inv.stdout, "softnic %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return err
	}
}

// buildVersion returns version, or what the build information records:
// the module version, then the VCS revision and whether the tree was dirty.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " rev " + rev + dirty
	}
	return v
}
