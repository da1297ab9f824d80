package app

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the suffixes ParseByteSize accepts (matched without regard to case): decimal ones (KB,
// MB…, and K, M… alone) count in powers of 1000, binary ones (KiB, MiB…, and Ki, Mi…) in powers of 1024,
// as Kubernetes and the IEC write them.
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12},
	{"b", 1},
}

// ParseByteSize parses a byte count: plain bytes ("4194304") or a number with a unit ("4GiB", "512MiB",
// "1.5GB", "64 KiB"; see byteUnits). A fraction is rounded to whole bytes. A leading minus is kept so that
// the settings' own checks can say why a negative value is wrong.
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty size (want bytes or a number with a unit, such as 4GiB)")
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return n, nil
	}
	lower := strings.ToLower(t)
	mult := 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	// Only plain decimal numbers: no hexadecimal, exponents, infinities or NaN from ParseFloat's wider syntax.
	if t == "" || strings.TrimLeft(t, "+-0123456789.") != "" || strings.Count(t, ".") > 1 || strings.LastIndexAny(t, "+-") > 0 {
		return 0, fmt.Errorf("size %q: want bytes or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), such as 4GiB", s)
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		// Whole numbers stay exact: a float64 holds integers only up to 2^53.
		m := int64(mult)
		if n > math.MaxInt64/m || n < math.MinInt64/m {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return n * m, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want bytes or a number with a unit, such as 4GiB", s)
	}
	v := math.Round(f * mult)
	if v >= math.MaxInt64 || v <= math.MinInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// FormatByteSize writes n with the largest binary unit that divides it exactly ("4MiB", "1GiB", "1000B"),
// a form ParseByteSize reads back.
func FormatByteSize(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// byteSize is a flag.Value holding a byte count given as ParseByteSize reads it.
type byteSize struct{ p *int64 }

func (b byteSize) String() string {
	if b.p == nil {
		return "0"
	}
	return FormatByteSize(*b.p)
}

func (b byteSize) Set(s string) error {
	n, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}
