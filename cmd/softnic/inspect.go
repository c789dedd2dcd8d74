package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
)

// inspectors are the commands that ask a running daemon over its control
// socket, each with the way it prints the result as a table.
var inspectors = map[string]func(w io.Writer, result json.RawMessage) error{
	"info": printInfo,
	"stat": printStat,
	"mr":   printRegions,
	"qp":   printQPs,
}

// defineInspect returns the define function of the inspecting command
// name: info, stat, mr or qp.
func defineInspect(name string) func(fs *flag.FlagSet) func(*invocation) error {
	return func(fs *flag.FlagSet) func(*invocation) error {
		controlPath := fs.String("control", defaultControlPath(), "the daemon's control socket `PATH` (softnic serve --control)")
		asJSON := fs.Bool("json", false, "print the daemon's answer as one line of JSON")
		var watch *watchFlag
		if name == "stat" {
			watch = defineWatch(fs)
		}
		return func(inv *invocation) error {
			if err := inv.parse(0, 1); err != nil {
				return err
			}
			if watch != nil && watch.on {
				return watchStat(inv, *controlPath, *asJSON, watch)
			}
			if len(inv.args) > 0 {
				return usagef("too many arguments: %s", inv.args[0])
			}
			var result json.RawMessage
			if err := control.Call(inv.ctx, *controlPath, name, &result); err != nil {
				return err
			}
			if *asJSON {
				_, err := fmt.Fprintf(inv.stdout, "%s\n", result)
				return err
			}
			return inspectors[name](inv.stdout, result)
		}
	}
}

func printInfo(w io.Writer, result json.RawMessage) error {
	var in control.Info
	if err := json.Unmarshal(result, &in); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	orNone := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, kv := range [][2]string{
		{"version", in.Version},
		{"pid", strconv.Itoa(in.PID)},
		{"up since", in.Started.Format(time.RFC3339) + " (" + time.Since(in.Started).Round(time.Second).String() + ")"},
		{"listen (UDP)", in.Listen},
		{"rdma_cm port", strconv.Itoa(int(in.CMPort))},
		{"MTU", strconv.Itoa(in.MTU)},
		{"UDP socket", in.UDP},
		{"ICRC of rxe's packets", orNone(in.ICRC)},
		{"control socket", in.Control},
		{"pcap", orNone(in.Pcap)},
		{"faults", orNone(in.Faults)},
		{"busy polling", orNone(in.BusyPoll)},
		{"regions", strconv.Itoa(in.Regions)},
		{"connections", strconv.Itoa(in.Connections)},
		{"attached processes", strconv.Itoa(in.Attached)},
		{"receive buffers", fmt.Sprintf("%d of %s", in.RecvBuffers, flagval.FormatSize(in.RecvBufSize))},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

func printStat(w io.Writer, result json.RawMessage) error {
	var l control.Counters
	if err := json.Unmarshal(result, &l); err != nil {
		return err
	}
	// Names to the left, values aligned on their last digit; a value
	// with a limit (the counter NAME_limit follows NAME) shows it on the
	// same line: 12 of 2048.
	limited := func(i int) bool { return i+1 < len(l) && l[i+1].Name == l[i].Name+"_limit" }
	nw, vw := 0, 0
	for i := 0; i < len(l); i++ {
		nw, vw = max(nw, len(l[i].Name)), max(vw, len(strconv.FormatUint(l[i].Value, 10)))
		if limited(i) {
			i++
		}
	}
	for i := 0; i < len(l); i++ {
		c, limit := l[i], ""
		if limited(i) {
			limit = " of " + strconv.FormatUint(l[i+1].Value, 10)
			if l[i+1].Value == math.MaxInt64 {
				limit = " of unlimited"
			}
			i++
		}
		if _, err := fmt.Fprintf(w, "%-*s  %*d%s\n", nw, c.Name, vw, c.Value, limit); err != nil {
			return err
		}
	}
	return nil
}

func printRegions(w io.Writer, result json.RawMessage) error {
	var rows []control.RegionRow
	if err := json.Unmarshal(result, &rows); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLKEY\tRKEY\tPD\tACCESS\tADDR\tLEN\tKIND\tPID\tODP RESIDENCY")
	for _, r := range rows {
		odp := "-"
		if r.ODP {
			odp = fmt.Sprintf("%d pages resident, %d faults", r.Pages, r.Faults)
		}
		name := r.Name
		if name == "" {
			name = "-" // a region of the device's own, such as the connection manager's buffers
		}
		fmt.Fprintf(tw, "%s\t%#x\t%#x\t%d\t%s\t%#x\t%d\t%s\t%d\t%s\n",
			name, r.LKey, r.RKey, r.PD, r.Access, r.Addr, r.Len, r.Kind, r.PID, odp)
	}
	return tw.Flush()
}

func printQPs(w io.Writer, result json.RawMessage) error {
	var rows []control.QPRow
	if err := json.Unmarshal(result, &rows); err != nil {
		return err
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no QPs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "QPN\tTYPE\tSTATE\tPEER\tPEER QPN\tMTU\tSEND PSN\tACKED PSN\tEXPECTED PSN\tMSN\tQUEUED\tCONNECTED\tPID")
	for _, r := range rows {
		since := "-"
		if !r.Since.IsZero() {
			since = r.Since.Format(time.TimeOnly)
		}
		fmt.Fprintf(tw, "%#x\t%s\t%s\t%s\t%#x\t%d\t0x%06x\t0x%06x\t0x%06x\t%d\t%d\t%s\t%d\n",
			r.QPN, r.Type, r.State, r.Peer, r.PeerQPN, r.MTU, r.SendPSN, r.AckedPSN, r.ExpectedPSN,
			r.MSN, r.SendQueued, since, r.PID)
	}
	return tw.Flush()
}
