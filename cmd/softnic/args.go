package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/wire"
)

// defaultCMPort is the rdma_cm port softnic serve listens on and the
// one-shot commands dial: 7471, the port librdmacm's examples (rping,
// rdma_server, udaddy) use.
const defaultCMPort = 7471

// numFlag is a flag holding an unsigned number of up to bits bits, in
// decimal or with a 0x, 0o or 0b prefix. With signed, a negative number is
// accepted too and stored in two's complement (an addend of -1 for a
// fetch-and-add). It remembers whether it was given, for required flags.
type numFlag struct {
	val    uint64
	bits   int
	signed bool
	set    bool
}

func (f *numFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.FormatUint(f.val, 10)
}

func (f *numFlag) Set(s string) error {
	v, err := parseNumber(s, f.bits, f.signed)
	if err != nil {
		return err
	}
	f.val, f.set = v, true
	return nil
}

// parseNumber parses an unsigned number of up to bits bits (decimal, 0x,
// 0o or 0b), or with signed a negative one in two's complement.
func parseNumber(s string, bits int, signed bool) (uint64, error) {
	if signed && strings.HasPrefix(s, "-") {
		v, err := strconv.ParseInt(s, 0, bits)
		if err != nil {
			return 0, numberError(err, bits)
		}
		return uint64(v) & (1<<bits - 1), nil
	}
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return 0, numberError(err, bits)
	}
	return v, nil
}

func numberError(err error, bits int) error {
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("out of range for %d bits", bits)
	}
	return errors.New("not a number (decimal, or hex with 0x)")
}

// parseSize parses a byte count as people write one: a number (decimal, or
// 0x hex without a unit) with an optional unit k, m or g, in either case,
// bare or followed by "iB" or "B" ("4096", "64k", "64KiB", "1MB", "1G",
// "2gib", "512b"). Every unit is a power of 1024, as in free, qemu's -m
// and systemd's MemoryMax: "1MB" is 1 MiB.
func parseSize(s string) (int, error) {
	v, err := parseByteCount(s)
	if err == nil && v == 0 {
		err = fmt.Errorf("size %q: must be at least one byte", s)
	}
	return v, err
}

// parseByteCount is parseSize with 0 allowed.
func parseByteCount(s string) (int, error) {
	num, base, shift := splitSizeUnit(s)
	v, err := strconv.ParseUint(num, base, 63)
	if err != nil || shift < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit k, m or g (KiB, MiB, GiB)", s)
	}
	if v > uint64(maxSize)>>shift {
		return 0, fmt.Errorf("size %q: larger than %s", s, formatSize(maxSize))
	}
	return int(v << shift), nil
}

// splitSizeUnit splits s into its digits, their base and the shift its
// unit stands for; the shift is -1 for a unit that is not one. A hex
// number takes no unit, since b is one of its digits; a decimal one with a
// leading 0 is still decimal.
func splitSizeUnit(s string) (num string, base, shift int) {
	if len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") {
		return s[2:], 16, 0
	}
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	shift, ok := sizeUnits[strings.ToLower(s[i:])]
	if !ok {
		return s[:i], 10, -1
	}
	return s[:i], 10, shift
}

// sizeUnits are the units parseSize takes (in lower case) and their
// shifts.
var sizeUnits = map[string]int{
	"": 0, "b": 0,
	"k": 10, "kb": 10, "kib": 10,
	"m": 20, "mb": 20, "mib": 20,
	"g": 30, "gb": 30, "gib": 30,
}

// maxSize bounds every size given on the command line: 64 GiB of address
// space, far more than a test host maps, small enough that a typo is
// caught before mmap.
const maxSize = 64 << 30

// formatSize writes a byte count the way parseSize reads it, with the
// largest suffix that divides it exactly.
func formatSize(n int) string {
	for _, u := range []struct {
		shift  int
		suffix string
	}{{30, "g"}, {20, "m"}, {10, "k"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.Itoa(n>>u.shift) + u.suffix
		}
	}
	return strconv.Itoa(n)
}

// sizeFlag is a flag holding a size as parseSize reads it, 0 included;
// val may hold a default. It remembers whether it was given, for required
// flags; the command checks the range, so that its message names the flag.
type sizeFlag struct {
	val int
	set bool
}

func (f *sizeFlag) String() string {
	if f == nil || f.val == 0 {
		return ""
	}
	return formatSize(f.val)
}

func (f *sizeFlag) Set(s string) error {
	v, err := parseByteCount(s)
	if err != nil {
		return err
	}
	f.val, f.set = v, true
	return nil
}

// parseAccess reads a region's remote access as letters: r (remote read),
// w (remote write), a (remote atomic), each at most once, in any order.
// Write and atomic imply local write, which ibv_reg_mr requires with them.
func parseAccess(s string) (mr.Access, error) {
	if s == "" {
		return 0, errors.New("empty access: want a combination of r, w and a")
	}
	var a mr.Access
	for _, c := range s {
		var bit mr.Access
		switch c {
		case 'r':
			bit = mr.RemoteRead
		case 'w':
			bit = mr.RemoteWrite | mr.LocalWrite
		case 'a':
			bit = mr.RemoteAtomic | mr.LocalWrite
		default:
			return 0, fmt.Errorf("access %q: %q is not r, w or a", s, c)
		}
		if a&bit&^mr.LocalWrite != 0 {
			return 0, fmt.Errorf("access %q: %q given twice", s, c)
		}
		a |= bit
	}
	return a, nil
}

// accessLetters is the inverse of parseAccess: the remote access of a as
// letters in the order r, w, a ("-" for none).
func accessLetters(a mr.Access) string {
	var b []byte
	for _, l := range []struct {
		bit    mr.Access
		letter byte
	}{{mr.RemoteRead, 'r'}, {mr.RemoteWrite, 'w'}, {mr.RemoteAtomic, 'a'}} {
		if a&l.bit != 0 {
			b = append(b, l.letter)
		}
	}
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

// regionSpec is a memory region softnic serve hosts.
type regionSpec struct {
	name   string
	size   int
	access mr.Access
}

// parseRegionSpec reads NAME:SIZE[:ACCESS]; ACCESS defaults to rw.
func parseRegionSpec(s string) (regionSpec, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return regionSpec{}, fmt.Errorf("region %q: want NAME:SIZE[:ACCESS]", s)
	}
	spec := regionSpec{name: parts[0], access: mr.RemoteRead | mr.RemoteWrite | mr.LocalWrite}
	if !validName(spec.name) {
		return regionSpec{}, fmt.Errorf("region %q: the name must be letters, digits, '-', '_' or '.'", s)
	}
	var err error
	if spec.size, err = parseSize(parts[1]); err != nil {
		return regionSpec{}, fmt.Errorf("region %q: %w", s, err)
	}
	if len(parts) == 3 {
		if spec.access, err = parseAccess(parts[2]); err != nil {
			return regionSpec{}, fmt.Errorf("region %q: %w", s, err)
		}
	}
	return spec, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// regionsFlag collects repeated --region flags, refusing a name given
// twice.
type regionsFlag []regionSpec

func (f *regionsFlag) String() string {
	if f == nil {
		return ""
	}
	s := make([]string, len(*f))
	for i, r := range *f {
		s[i] = r.name + ":" + formatSize(r.size) + ":" + accessLetters(r.access)
	}
	return strings.Join(s, " ")
}

func (f *regionsFlag) Set(s string) error {
	spec, err := parseRegionSpec(s)
	if err != nil {
		return err
	}
	for _, r := range *f {
		if r.name == spec.name {
			return fmt.Errorf("region name %q given twice", spec.name)
		}
	}
	*f = append(*f, spec)
	return nil
}

// limitsFlag collects repeated --limit SCOPE.RESOURCE=N flags of softnic
// serve, each checked as it comes. N is a count or a size as parseSize
// reads them, without its bound, or "unlimited".
type limitsFlag []limitSetting

type limitSetting struct {
	key string
	n   int64
}

func (f *limitsFlag) String() string {
	if f == nil {
		return ""
	}
	s := make([]string, len(*f))
	for i, l := range *f {
		s[i] = l.key + "=" + strconv.FormatInt(l.n, 10)
	}
	return strings.Join(s, " ")
}

func (f *limitsFlag) Set(s string) error {
	key, val, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want SCOPE.RESOURCE=N, such as process.qps=4096 or uid.memory=64g", s)
	}
	n := int64(math.MaxInt64)
	if val != "unlimited" {
		num, base, shift := splitSizeUnit(val)
		v, err := strconv.ParseUint(num, base, 63)
		if err != nil || shift < 0 || v == 0 || v > math.MaxInt64>>shift {
			return fmt.Errorf("%q: want a positive number, with an optional unit k, m or g, or unlimited", s)
		}
		n = int64(v << shift)
	}
	var check quota.Limits
	if err := check.Set(key, n); err != nil {
		return err
	}
	*f = append(*f, limitSetting{key, n})
	return nil
}

// apply sets the limits of f in l.
func (f limitsFlag) apply(l *quota.Limits) {
	for _, s := range f {
		l.Set(s.key, s.n) // checked by Set
	}
}

// resolvePeer turns HOST[:PORT] into the address of a softnic device; the
// port defaults to 4791, RoCEv2's. A host name is looked up (within ctx).
func resolvePeer(ctx context.Context, s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, errors.New("missing --peer HOST:PORT")
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return netip.AddrPortFrom(a, wire.UDPPort), nil
	}
	host, port := s, uint64(wire.UDPPort)
	if h, p, err := net.SplitHostPort(s); err == nil {
		if port, err = strconv.ParseUint(p, 10, 16); err != nil {
			return netip.AddrPort{}, fmt.Errorf("peer %q: bad port %q", s, p)
		}
		host = h
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("peer %q: cannot resolve %q", s, host)
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), nil
}

// defaultControlPath is where softnic serve puts its control socket and
// the inspecting commands look for it: $XDG_RUNTIME_DIR/softnic.sock, or
// without a runtime directory softnic.sock in tempControlDir.
func defaultControlPath() string { return nic.DefaultSocket() }

// addMTUFlag defines a command's --mtu, a size (so "4k" is 4096) with
// the default def; checkMTUFlag checks it.
func addMTUFlag(fs *flag.FlagSet, def int, usage string) *sizeFlag {
	f := &sizeFlag{val: def}
	fs.Var(f, "mtu", usage)
	return f
}

// checkMTUFlag checks a tool's --mtu: 0 (not given) or a RoCE MTU.
func checkMTUFlag(mtu int) error {
	if _, ok := wire.MTUFromBytes(mtu); !ok && mtu != 0 {
		return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", mtu)
	}
	return nil
}
