package grammar

import (
	"math/big"
	"strings"
)

// feedNumber returns f after b, or nil when b cannot continue the number (JSON's number syntax, the digit
// limits, no fraction or exponent for integers, and the bounds: a prefix is kept only if some completion of
// it lies within [minimum, maximum]).
func feedNumber(f *frame, b byte) *frame {
	n := f.n
	digit := b >= '0' && b <= '9'
	bounded := n.min != nil || n.max != nil
	nf := *f
	nf.buf = f.buf + string([]byte{b})
	switch {
	case f.ph == nStart && b == '-':
		nf.ph = nMinus
	case (f.ph == nStart || f.ph == nMinus) && b == '0':
		nf.ph, nf.i = nZero, 1
	case (f.ph == nStart || f.ph == nMinus) && digit:
		nf.ph, nf.i = nInt, 1
	case f.ph == nInt && digit && f.i < maxIntDigits:
		nf.i++
	case (f.ph == nZero || f.ph == nInt) && b == '.' && !n.integer:
		nf.ph = nDot
	case (f.ph == nDot || f.ph == nFrac) && digit && f.j < maxFracDigits:
		nf.ph, nf.j = nFrac, f.j+1
	case (f.ph == nZero || f.ph == nInt || f.ph == nFrac) && (b == 'e' || b == 'E') && !n.integer && !bounded:
		nf.ph = nE
	case f.ph == nE && (b == '+' || b == '-'):
		nf.ph = nESign
	case (f.ph == nE || f.ph == nESign || f.ph == nExp) && digit && f.lo < maxExpDigits:
		nf.ph, nf.lo = nExp, f.lo+1
	default:
		return nil
	}
	if bounded && !viable(n, &nf) {
		return nil
	}
	return &nf
}

func numberComplete(f *frame) bool {
	switch f.ph {
	case nZero, nInt, nFrac, nExp:
	default:
		return false
	}
	if f.n.min == nil && f.n.max == nil {
		return true
	}
	v, ok := new(big.Rat).SetString(f.buf)
	return ok && inBounds(f.n, v)
}

func inBounds(n *node, v *big.Rat) bool {
	return (n.min == nil || v.Cmp(n.min) >= 0) && (n.max == nil || v.Cmp(n.max) <= 0)
}

// viable reports whether some number that starts with f.buf (within the digit limits) lies within n's bounds.
// Bounded numbers have no exponent, so the completions of a prefix are unions of intervals: the integer part
// D may stop, gain a fraction (D.x in [D, D+1)) or gain m more digits ([D·10^m, (D+1)·10^m)); a fraction
// D.F of k digits may gain more ([D.F, D.F + 10^-k)). Negative prefixes mirror that.
func viable(n *node, f *frame) bool {
	s := f.buf
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	if body == "" {
		for d := byte('0'); d <= '9'; d++ {
			if g := feedNumber(&frame{n: &node{kind: kNumber, integer: n.integer}, ph: nMinus, buf: s}, d); g != nil {
				g.n = n
				if viable(n, g) {
					return true
				}
			}
		}
		return false
	}
	intPart, frac, hasDot := strings.Cut(body, ".")
	// hits reports whether the magnitudes [a, b) (b nil: only a itself) meet the bounds, after the sign.
	hits := func(a, b *big.Rat) bool {
		if b == nil {
			v := new(big.Rat).Set(a)
			if neg {
				v.Neg(v)
			}
			return inBounds(n, v)
		}
		lo, hi := new(big.Rat).Set(a), new(big.Rat).Set(b)
		if neg {
			lo, hi = hi.Neg(hi), lo.Neg(lo) // (-b, -a]
			return (n.min == nil || hi.Cmp(n.min) >= 0) && (n.max == nil || lo.Cmp(n.max) < 0)
		}
		return (n.max == nil || lo.Cmp(n.max) <= 0) && (n.min == nil || hi.Cmp(n.min) > 0)
	}
	d, _ := new(big.Rat).SetString(intPart)
	if hasDot {
		v, _ := new(big.Rat).SetString(intPart + "." + frac + "0")
		if len(frac) >= maxFracDigits {
			return hits(v, nil)
		}
		w := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
		return hits(v, new(big.Rat).Add(v, w))
	}
	if hits(d, nil) {
		return true
	}
	one := big.NewRat(1, 1)
	if !n.integer && hits(d, new(big.Rat).Add(d, one)) {
		return true
	}
	if intPart == "0" {
		return false
	}
	ten := big.NewRat(10, 1)
	a, b := new(big.Rat).Set(d), new(big.Rat).Add(d, one)
	for m := len(intPart) + 1; m <= maxIntDigits; m++ {
		a.Mul(a, ten)
		b.Mul(b, ten)
		if hits(a, b) {
			return true
		}
	}
	return false
}

// reachable reports whether some number within the digit limits lies within n's bounds.
func reachable(n *node) bool {
	limit := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(maxIntDigits), nil))
	if n.min != nil && n.min.Cmp(limit) >= 0 {
		return false
	}
	return n.max == nil || n.max.Cmp(new(big.Rat).Neg(limit)) > 0
}
