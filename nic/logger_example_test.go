package nic_test

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/softnic/softnic/nic"
)

// A device logs its control-path events through the *slog.Logger of its
// Config; this one writes them as text on stdout, without the attributes
// that differ from run to run (the time, the port, the socket's
// offloads).
func ExampleConfig_logger() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey, "addr", "udp", "faults":
			return slog.Attr{}
		}
		return a
	}})
	dev, err := nic.Open(nic.Config{Embed: true, Addr: loopback, MTU: 1024, Logger: slog.New(h)})
	if err != nil {
		fmt.Println(err)
		return
	}
	dev.Close()
	// Output:
	// level=INFO msg="softnic device open" mtu=1024
	// level=INFO msg="softnic device closed"
}
