package perftest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// perftest's figures and result tables. Bandwidths are in MiB per second
// (perftest's MB/sec), message rates in millions per second, latencies in
// microseconds.

// mib is perftest's megabyte.
const mib = 1 << 20

// noPeakIters is the iteration count above which perftest gives up finding
// the peak bandwidth (it reports 0).
const noPeakIters = 20000

// bwFigures computes a bandwidth test client's figures as perftest does,
// from the time each message was posted and the time each signaled one
// (every cqModeration-th and the last) completed, as offsets from the
// start: the average over the whole run (first post to last completion),
// and the peak, the best average over any run of messages from one post to
// a later signaled completion.
func bwFigures(size int, posted, completed []time.Duration, cqModeration int) bwReport {
	n := len(posted)
	r := bwReport{Size: uint64(size), Iters: uint64(n)}
	elapsed := completed[n-1] - posted[0]
	if elapsed <= 0 {
		return r
	}
	secs := elapsed.Seconds()
	r.AvgMBs = float64(size) * float64(n) / secs / mib
	r.MsgRate = float64(n) / secs / 1e6
	if n > noPeakIters {
		return r
	}
	best := elapsed.Seconds() // per message, over the whole run
	try := func(i, j int) {
		if per := (completed[j] - posted[i]).Seconds() / float64(j-i+1); per > 0 && per < best {
			best = per
		}
	}
	for i := range n {
		// Signaled completions: every cqModeration-th message from the
		// first at or after i, and the last.
		for j := (i+cqModeration)/cqModeration*cqModeration - 1; j < n; j += cqModeration {
			try(i, j)
		}
		try(i, n-1)
	}
	r.PeakMBs = float64(size) / best / mib
	return r
}

// receiverFigures computes a send_bw server's figures from the time
// between its first and its last receive completion; like perftest's
// server it has no peak.
func receiverFigures(size, n int, elapsed time.Duration) bwReport {
	r := bwReport{Size: uint64(size), Iters: uint64(n)}
	if elapsed > 0 {
		r.AvgMBs = float64(size) * float64(n) / elapsed.Seconds() / mib
		r.MsgRate = float64(n) / elapsed.Seconds() / 1e6
	}
	return r
}

// latencyFigures are write_lat's results.
type latencyFigures struct {
	Min, Max, Typical, Avg, Stdev, P99, P999 float64 // microseconds
}

// latencyTail is how many of the largest samples perftest leaves out of
// its figures (LAT_MEASURE_TAIL).
const latencyTail = 2

// computeLatency computes write_lat's figures as perftest does: a sample
// is half the time between two successive posts of one side (each post
// waits for the peer's answer to the one before: a round trip); the two
// largest samples are left out; "typical" is the median; the maximum and
// the percentiles are read from the sorted samples at perftest's indexes
// (the maximum is the largest sample left out). The standard deviation is
// computed exactly, where perftest truncates each deviation to a whole
// microsecond.
func computeLatency(posted []time.Duration) latencyFigures {
	var f latencyFigures
	if len(posted) < 2 {
		return f
	}
	d := make([]float64, len(posted)-1)
	for i := range d {
		d[i] = float64(posted[i+1]-posted[i]) / float64(time.Microsecond) / 2
	}
	slices.Sort(d)
	m := len(d) - latencyTail
	if m < 1 {
		m = len(d)
	}
	at := func(i int) float64 { return d[min(i, len(d)-1)] }
	f.Min, f.Max = d[0], at(m)
	if m%2 == 0 {
		f.Typical = (d[m/2] + d[m/2-1]) / 2
	} else {
		f.Typical = d[m/2]
	}
	var sum, sq float64
	for _, v := range d[:m] {
		sum += v
	}
	f.Avg = sum / float64(m)
	for _, v := range d[:m] {
		sq += (v - f.Avg) * (v - f.Avg)
	}
	f.Stdev = math.Sqrt(sq / float64(m))
	f.P99 = at(int(math.Ceil(float64(m) * 0.99)))
	f.P999 = at(int(math.Ceil(float64(m) * 0.999)))
	return f
}

// perftest's table layout.
const (
	resultLine   = "---------------------------------------------------------------------------------------\n"
	bwHeader     = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	latHeader    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	bwRowFormat  = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
	latRowFormat = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
)

// title is the test's name in perftest's header.
func (s *perfSession) title() string {
	switch s.cfg.Test {
	case WriteBW:
		return "RDMA_Write BW Test"
	case ReadBW:
		return "RDMA_Read BW Test"
	case SendBW:
		return "Send BW Test"
	case AtomicBW:
		return "Atomic " + s.cfg.Atomic.String() + " BW Test"
	}
	return "RDMA_Write Latency Test"
}

// printHeader prints the test's header and both sides' key records, in
// perftest's format.
func (s *perfSession) printHeader() error {
	var b strings.Builder
	b.WriteString(resultLine)
	fmt.Fprintf(&b, "%20s%s\n", "", s.title())
	fmt.Fprintf(&b, " Connection type : RC\t\tDevice         : softnic\n")
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", s.params.mtu.Bytes())
	fmt.Fprintf(&b, " Link type       : Ethernet\n")
	fmt.Fprintf(&b, " Data ex. method : Ethernet\n")
	b.WriteString(resultLine)
	s.appendAddress(&b, "local", &s.local)
	s.appendAddress(&b, "remote", &s.remote)
	b.WriteString(resultLine)
	if s.cfg.Test == WriteLat {
		b.WriteString(latHeader)
	} else {
		b.WriteString(bwHeader)
	}
	_, err := io.WriteString(s.out, b.String())
	return err
}

// appendAddress writes a key record as perftest prints it (the GID's
// bytes in decimal, as perftest has them).
func (s *perfSession) appendAddress(b *strings.Builder, side string, k *keyRecord) {
	fmt.Fprintf(b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(k.LID), 4), cHex(uint64(k.QPN), 6), cHex(uint64(k.PSN), 6))
	switch s.cfg.Test {
	case ReadBW:
		fmt.Fprintf(b, " OUT %s", cHex(uint64(k.OutReads), 4))
		fallthrough
	case WriteBW, WriteLat:
		fmt.Fprintf(b, " RKey %s VAddr %s", cHex(uint64(k.RKey), 8), cHex(k.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, g := range k.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(b, "%02d", g)
	}
	b.WriteByte('\n')
}

// cHex formats v as C's printf("%#0*x", width, v) does, which perftest's
// address lines use: the width counts the "0x", and zero gets no "0x".
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// printBW prints a bandwidth row and the closing line.
func (s *perfSession) printBW(r *bwReport) error {
	_, err := fmt.Fprintf(s.out, bwRowFormat+resultLine, r.Size, r.Iters, r.PeakMBs, r.AvgMBs, r.MsgRate)
	return err
}

// printLatency prints write_lat's row and the closing line.
func (s *perfSession) printLatency(r *latencyResult) error {
	f := computeLatency(r.posted)
	_, err := fmt.Fprintf(s.out, latRowFormat+resultLine, s.cfg.Size, s.cfg.Iters,
		f.Min, f.Max, f.Typical, f.Avg, f.Stdev, f.P99, f.P999)
	return err
}
