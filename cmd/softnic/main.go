// Command softnic is the command-line front end of softnic, the pure-Go
// RoCEv2 NIC: it runs the daemon and the demos and inspects packets and
// captures. Each subcommand has its own flags; "softnic help COMMAND" or
// "softnic COMMAND --help" describes one.
//
// Exit status: 0 on success, 1 when a command fails, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/softnic/softnic/cmd/softnic/internal/exit"
)

// command is one subcommand. Adding a command is adding a line to commands.
type command struct {
	name    string
	args    string // synopsis of the arguments, e.g. "FILE.pcap [-v]"
	summary string // one line for the command list
	example string // shown by --help
	// define registers the command's flags on fs and returns the function
	// that runs the command.
	define func(fs *flag.FlagSet) func(inv *invocation) error
}

var commands = []command{
	{"demo", "[--scenario NAME] [--step] [--html FILE] [--pcap FILE] [--mtu N]",
		"two NICs in one process: WRITE, READ, atomics, SEND, WRITE WITH IMMEDIATE and a bad rkey, every packet decoded; or, with --scenario, one thing going wrong on the link (loss, timeout, rnr, seqerr, atomic-replay, bad-rkey), drawn as a ladder",
		"softnic demo --scenario loss --step --html loss.html", defineDemo},
	{"serve", "[--listen ADDR:PORT] [--cm-port PORT] [--region NAME:SIZE[:ACCESS]]... [--pcap FILE] [--control PATH] [--log-level LEVEL] [--faults SPEC] [--busy-poll DURATION] [--metrics ADDR:PORT] [--http ADDR:PORT [--http-allow-remote]]",
		"run the daemon: host memory regions and accept RDMA connections",
		"softnic serve --listen 127.0.0.1:4791 --region mem:1m:rwa --pcap serve.pcap", defineServe},
	{"info", "[--control PATH] [--json]", "show a running daemon's device attributes",
		"softnic info", defineInspect("info")},
	{"stat", "[--control PATH] [--json] [--watch [INTERVAL]]", "show a running daemon's counters: rxe's, the drop reasons and the refused accesses; --watch: with their rates, every INTERVAL (1s)",
		"softnic stat --watch 2s", defineInspect("stat")},
	{"mr", "[--control PATH] [--json]", "list a running daemon's memory regions: keys, ranges, access, ODP residency",
		"softnic mr", defineInspect("mr")},
	{"qp", "[--control PATH] [--json]", "list a running daemon's connected QPs: state, PSNs, peer",
		"softnic qp", defineInspect("qp")},
	{"write", "--peer HOST:PORT --rkey K --addr A (--data STRING | --file F) [--cm-port PORT] [--timeout D]",
		"RDMA WRITE bytes into a daemon's region",
		"softnic write --peer 127.0.0.1:4791 --rkey 0x1234 --addr 0x7f0000000000 --data hello", defineWrite},
	{"read", "--peer HOST:PORT --rkey K --addr A --len N [--out F] [--cm-port PORT] [--timeout D]",
		"RDMA READ bytes from a daemon's region, to stdout or a file",
		"softnic read --peer 127.0.0.1:4791 --rkey 0x1234 --addr 0x7f0000000000 --len 5", defineRead},
	{"fadd", "--peer HOST:PORT --rkey K --addr A --add N [--cm-port PORT] [--timeout D]",
		"ATOMIC FETCH_ADD on an 8-byte word of a daemon's region; prints the original value",
		"softnic fadd --peer 127.0.0.1:4791 --rkey 0x1234 --addr 0x7f0000000008 --add 1", defineAtomic(false)},
	{"cswap", "--peer HOST:PORT --rkey K --addr A --compare C --swap S [--cm-port PORT] [--timeout D]",
		"ATOMIC COMPARE_SWAP on an 8-byte word of a daemon's region; prints the original value",
		"softnic cswap --peer 127.0.0.1:4791 --rkey 0x1234 --addr 0x7f0000000008 --compare 1 --swap 100", defineAtomic(true)},
	{"send", "--peer HOST:PORT (--data STRING | --file F) [--cm-port PORT] [--timeout D]",
		"SEND a message to a daemon, which logs it",
		"softnic send --peer 127.0.0.1:4791 --data 'hello, daemon'", defineSend},
	{"perftest", "TEST [--bind ADDR] [-s SIZE] [-n ITERS] [-A FETCH_AND_ADD|CMP_AND_SWAP] [-u TIMEOUT] [--mtu N] [--port N] [--oob-port N] [--counters] [--pcap FILE] [HOST]",
		"run a perftest test (write_bw, read_bw, send_bw, atomic_bw, write_lat) against perftest or softnic: server without HOST, client with it",
		"softnic perftest write_bw -s 8192 -n 1000 10.77.0.12", definePerftest},
	{"rping", "(-s | -c) -a ADDR [-C COUNT] [-S SIZE] [-v] [-p PORT] [-I ADDR] [--udp-port N] [--mtu N] [--counters] [--pcap FILE]",
		"rdma-core's rping over the connection manager, against rping or softnic: a SEND of a buffer, RDMA READ, SEND, RDMA WRITE back, compared",
		"softnic rping -c -a 10.77.0.12 -C 3 -v", defineRping},
	{"bench", "[--time D] [--ops N] [--runs R] [--one-process] [--only KEYS] [--attach PATH] [--cpuprofile FILE] [--json]",
		"measure softnic on this machine with fi_rmabw's workloads, its peer in another process, against raw UDP in the same run (and an attached device against an embedded one)",
		"softnic bench --runs 3", defineBench},
	{"run", "[--control PATH] [--lib DIR] -- PROGRAM [ARGS...]",
		"run an unmodified libibverbs/librdmacm program (perftest, rping …) on the daemon, through libsoftnic",
		"softnic run -- ib_write_bw -F 127.0.0.1", defineRun},
	{"decode", "FILE|- [-v | --json | --ladder] [--html FILE] [--port N]... [--ack-timeout D]",
		"print every RoCEv2 packet of a pcap or pcapng capture (- reads standard input): one line each, one JSON object each, or a sequence diagram naming what went wrong",
		"softnic decode --ladder ../shared/golden/host_dropack.pcap", defineDecode},
	{"version", "", "print softnic's version", "softnic version", defineVersion},
}

// hiddenCommands run like commands but are not listed: what softnic runs
// itself as.
var hiddenCommands = []command{
	{benchPeerCommand, "[--wait] [--cpuprofile FILE]", "the peer device of softnic bench, in a process of its own: it serves on stdin and stdout and ends with stdin",
		"softnic " + benchPeerCommand + " < requests", defineBenchPeer},
}

// invocation is what a subcommand runs with: its own flag set, the
// positional arguments once parsed, and where to write.
type invocation struct {
	ctx    context.Context // cancelled to stop a long-running command (tests); signals stop serve too
	cmd    *command
	flags  *flag.FlagSet
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// usageError is a mistake in the command line; it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run with a context whose cancellation stops the command.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

// runIO is runContext with the standard input given (decode reads "-").
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				fs := newFlagSet(c)
				c.define(fs)
				printCommandUsage(stdout, c, fs)
				return 0
			}
			fmt.Fprintf(stderr, "softnic help: unknown command %q\n", args[1])
			return 2
		}
		printUsage(stdout)
		return 0
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "softnic: unknown command %q\n\n", name)
		printUsage(stderr)
		return 2
	}
	inv := &invocation{ctx: ctx, cmd: c, flags: newFlagSet(c), args: args[1:], stdin: stdin, stdout: stdout, stderr: stderr}
	err := c.define(inv.flags)(inv)
	var (
		uerr *usageError
		xerr *exit.Error
	)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		printCommandUsage(stdout, c, inv.flags)
		return 0
	case errors.As(err, &xerr):
		fmt.Fprintf(stderr, "softnic %s: %v\n", c.name, err)
		return xerr.Status
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "softnic %s: %v\n", c.name, err)
		printCommandUsage(stderr, c, inv.flags)
		return 2
	default:
		fmt.Fprintf(stderr, "softnic %s: %v\n", c.name, err)
		return 1
	}
}

func lookup(name string) *command {
	for _, cmds := range [][]command{commands, hiddenCommands} {
		for i := range cmds {
			if cmds[i].name == name {
				return &cmds[i]
			}
		}
	}
	return nil
}

// newFlagSet returns a silent flag set: run prints usage and errors itself.
func newFlagSet(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("softnic "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses the flags, which may come before, between or after the
// positional arguments (up to a "--"), and checks that there are between min
// and max positional arguments (max < 0: no limit). Errors are usage errors,
// or flag.ErrHelp for -h/--help.
func (inv *invocation) parse(min, max int) error {
	args, rest := inv.args, []string(nil)
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := inv.flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return &usageError{err.Error()}
		}
		args = inv.flags.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	inv.args = append(pos, rest...)
	switch n := len(inv.args); {
	case n < min:
		return usagef("missing argument")
	case max >= 0 && n > max:
		return usagef("too many arguments: %s", strings.Join(inv.args[max:], " "))
	}
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "softnic: a software RDMA NIC speaking RoCEv2\n\nusage: softnic COMMAND [ARGUMENTS]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"softnic help COMMAND\" or \"softnic COMMAND --help\" for details.\n")
}

func printCommandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: softnic %s %s\n\n%s\n", c.name, c.args, c.summary)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintf(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	fmt.Fprintf(w, "\nexample:\n  %s\n", c.example)
}
