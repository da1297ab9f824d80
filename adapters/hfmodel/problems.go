package hfmodel

import "fmt"

// problems collects every validation problem of a parsed config, each wrapping ErrInvalidConfig, so a bad
// config is reported whole (errors.Join) rather than one error at a time.
type problems []error

func (p *problems) bad(format string, args ...any) {
	*p = append(*p, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
}

func (p *problems) positive(name string, v int) {
	if v <= 0 {
		p.bad("%s must be positive (got %d)", name, v)
	}
}

// multiple checks that a (named aName) is a multiple of b (bName); non-positive values are left to positive.
func (p *problems) multiple(aName string, a int, bName string, b int) {
	if a > 0 && b > 0 && a%b != 0 {
		p.bad("%s %d is not a multiple of %s %d", aName, a, bName, b)
	}
}
