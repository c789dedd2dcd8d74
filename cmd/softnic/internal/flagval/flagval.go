// Package flagval holds the values of softnic's flags as types: numbers
// of a given width, sizes with units ("64k", "1MiB"), a region's remote
// access as letters ("rwa"), serve's regions and limits; each parses what
// the command line says and prints it back.
package flagval

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/quota"
)

// Num is a flag holding an unsigned number of up to bits bits, in
// decimal or with a 0x, 0o or 0b prefix. With signed, a negative number is
// accepted too and stored in two's complement (an addend of -1 for a
// fetch-and-add). It remembers whether it was given, for required flags.
type Num struct {
	Val    uint64
	Bits   int
	Signed bool
	Given  bool
}

func (f *Num) String() string {
	if f == nil || !f.Given {
		return ""
	}
	return strconv.FormatUint(f.Val, 10)
}

func (f *Num) Set(s string) error {
	v, err := ParseNumber(s, f.Bits, f.Signed)
	if err != nil {
		return err
	}
	f.Val, f.Given = v, true
	return nil
}

// ParseNumber parses an unsigned number of up to bits bits (decimal, 0x,
// 0o or 0b), or with signed a negative one in two's complement.
func ParseNumber(s string, bits int, signed bool) (uint64, error) {
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

// ParseSize parses a byte count as people write one: a number (decimal, or
// 0x hex without a unit) with an optional unit k, m or g, in either case,
// bare or followed by "iB" or "B" ("4096", "64k", "64KiB", "1MB", "1G",
// "2gib", "512b"). Every unit is a power of 1024, as in free, qemu's -m
// and systemd's MemoryMax: "1MB" is 1 MiB.
func ParseSize(s string) (int, error) {
	v, err := ParseByteCount(s)
	if err == nil && v == 0 {
		err = fmt.Errorf("size %q: must be at least one byte", s)
	}
	return v, err
}

// ParseByteCount is ParseSize with 0 allowed.
func ParseByteCount(s string) (int, error) {
	num, base, shift := splitSizeUnit(s)
	v, err := strconv.ParseUint(num, base, 63)
	if err != nil || shift < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit k, m or g (KiB, MiB, GiB)", s)
	}
	if v > uint64(MaxSize)>>shift {
		return 0, fmt.Errorf("size %q: larger than %s", s, FormatSize(MaxSize))
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

// sizeUnits are the units ParseSize takes (in lower case) and their
// shifts.
var sizeUnits = map[string]int{
	"": 0, "b": 0,
	"k": 10, "kb": 10, "kib": 10,
	"m": 20, "mb": 20, "mib": 20,
	"g": 30, "gb": 30, "gib": 30,
}

// MaxSize bounds every size given on the command line: 64 GiB of address
// space, far more than a test host maps, small enough that a typo is
// caught before mmap.
const MaxSize = 64 << 30

// FormatSize writes a byte count the way ParseSize reads it, with the
// largest suffix that divides it exactly.
func FormatSize(n int) string {
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

// Size is a flag holding a size as ParseSize reads it, 0 included;
// val may hold a default. It remembers whether it was given, for required
// flags; the command checks the range, so that its message names the flag.
type Size struct {
	Val   int
	Given bool
}

func (f *Size) String() string {
	if f == nil || f.Val == 0 {
		return ""
	}
	return FormatSize(f.Val)
}

func (f *Size) Set(s string) error {
	v, err := ParseByteCount(s)
	if err != nil {
		return err
	}
	f.Val, f.Given = v, true
	return nil
}

// ParseAccess reads a region's remote access as letters: r (remote read),
// w (remote write), a (remote atomic), each at most once, in any order.
// Write and atomic imply local write, which ibv_reg_mr requires with them.
func ParseAccess(s string) (mr.Access, error) {
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

// AccessLetters is the inverse of ParseAccess: the remote access of a as
// letters in the order r, w, a ("-" for none).
func AccessLetters(a mr.Access) string {
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

// Region is a memory region softnic serve hosts.
type Region struct {
	Name   string
	Size   int
	Access mr.Access
}

// ParseRegion reads NAME:SIZE[:ACCESS]; ACCESS defaults to rw.
func ParseRegion(s string) (Region, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Region{}, fmt.Errorf("region %q: want NAME:SIZE[:ACCESS]", s)
	}
	spec := Region{Name: parts[0], Access: mr.RemoteRead | mr.RemoteWrite | mr.LocalWrite}
	if !validName(spec.Name) {
		return Region{}, fmt.Errorf("region %q: the name must be letters, digits, '-', '_' or '.'", s)
	}
	var err error
	if spec.Size, err = ParseSize(parts[1]); err != nil {
		return Region{}, fmt.Errorf("region %q: %w", s, err)
	}
	if len(parts) == 3 {
		if spec.Access, err = ParseAccess(parts[2]); err != nil {
			return Region{}, fmt.Errorf("region %q: %w", s, err)
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

// Regions collects repeated --region flags, refusing a name given
// twice.
type Regions []Region

func (f *Regions) String() string {
	if f == nil {
		return ""
	}
	s := make([]string, len(*f))
	for i, r := range *f {
		s[i] = r.Name + ":" + FormatSize(r.Size) + ":" + AccessLetters(r.Access)
	}
	return strings.Join(s, " ")
}

func (f *Regions) Set(s string) error {
	spec, err := ParseRegion(s)
	if err != nil {
		return err
	}
	for _, r := range *f {
		if r.Name == spec.Name {
			return fmt.Errorf("region name %q given twice", spec.Name)
		}
	}
	*f = append(*f, spec)
	return nil
}

// Limits collects repeated --limit SCOPE.RESOURCE=N flags of softnic
// serve, each checked as it comes. N is a count or a size as ParseSize
// reads them, without its bound, or "unlimited".
type Limits []limitSetting

type limitSetting struct {
	key string
	n   int64
}

func (f *Limits) String() string {
	if f == nil {
		return ""
	}
	s := make([]string, len(*f))
	for i, l := range *f {
		s[i] = l.key + "=" + strconv.FormatInt(l.n, 10)
	}
	return strings.Join(s, " ")
}

func (f *Limits) Set(s string) error {
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

// Apply sets the limits of f in l.
func (f Limits) Apply(l *quota.Limits) {
	for _, s := range f {
		l.Set(s.key, s.n) // checked by Set
	}
}
