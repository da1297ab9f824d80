package batch

import (
	"errors"
	"fmt"
)

// DefaultTokenFloor is the fewest tokens a request without a token limit is given room for when the budget
// allows (its fair share may be less when its prompt is long): enough for a useful answer.
const DefaultTokenFloor = 256

// Demand is what memory admission knows of a request.
type Demand struct {
	// Room is the tokens the context leaves after the prompt (≥ 1): the most it may ever generate.
	Room int
	// MaxTokens is the client's limit; 0 when it set none.
	MaxTokens int
	// Total is the whole memory budget in bytes; Concurrency the batch size it is shared by.
	Total       int64
	Concurrency int
	// Cost is the bytes the request reserves to generate tokens tokens (its prompt included); it must not
	// decrease as tokens grows.
	Cost func(tokens int) int64
}

// Admission is what a request reserves.
type Admission struct {
	// Tokens is its token budget: MaxTokens when the client set one, else what the server chose.
	Tokens int
	// Bytes is Cost(Tokens).
	Bytes int64
	// Capped says the server chose Tokens below Room (no MaxTokens): the generation ends with "length" there.
	Capped bool
}

// OverBudgetError says a request can never fit in the budget. It wraps ErrOverBudget.
type OverBudgetError struct {
	// Tokens is the token budget that was priced (MaxTokens, or 1 when even one token does not fit).
	Tokens int
	// Need is its cost; Total the budget.
	Need, Total int64
	// Fits is the most tokens that do fit (0: not even one: the prompt alone is too large).
	Fits int
}

func (e *OverBudgetError) Error() string {
	if e.Fits == 0 {
		return fmt.Sprintf("%v: the prompt with even one generated token needs %d bytes of KV cache and state, more than the whole memory budget of %d bytes",
			ErrOverBudget, e.Need, e.Total)
	}
	return fmt.Sprintf("%v: the prompt and %d generated tokens need %d bytes of KV cache and state, more than the whole memory budget of %d bytes",
		ErrOverBudget, e.Tokens, e.Need, e.Total)
}

func (e *OverBudgetError) Unwrap() error { return ErrOverBudget }

// Admit chooses what request d reserves. A client's MaxTokens is reserved whole, or refused when it can never
// fit. Without one, reserving the whole context (what the generation could reach) would refuse or serialize
// every such request on a long-context model, so the request gets its fair share of the budget
// (Total/Concurrency), raised to DefaultTokenFloor tokens where the share is less, never past the room nor the
// whole budget, and its generation is capped there. Only a prompt that cannot fit with one token is refused.
func Admit(d Demand) (Admission, error) {
	switch {
	case d.Room < 1:
		return Admission{}, fmt.Errorf("admission: room %d must be ≥ 1", d.Room)
	case d.MaxTokens < 0:
		return Admission{}, fmt.Errorf("admission: max tokens %d must be ≥ 0", d.MaxTokens)
	case d.Total <= 0 || d.Concurrency < 1 || d.Cost == nil:
		return Admission{}, errors.New("admission: a budget > 0, a concurrency ≥ 1 and a cost are required")
	}
	if d.MaxTokens > 0 {
		need := d.Cost(d.MaxTokens)
		if need > d.Total {
			fits := largestFitting(min(d.MaxTokens, d.Room), d.Total, d.Cost)
			if fits == 0 {
				return Admission{}, &OverBudgetError{Tokens: 1, Need: d.Cost(1), Total: d.Total}
			}
			return Admission{}, &OverBudgetError{Tokens: d.MaxTokens, Need: need, Total: d.Total, Fits: fits}
		}
		return Admission{Tokens: d.MaxTokens, Bytes: need}, nil
	}
	limit := max(d.Total/int64(d.Concurrency), d.Cost(min(DefaultTokenFloor, d.Room)))
	limit = min(limit, d.Total)
	n := largestFitting(d.Room, limit, d.Cost)
	if n == 0 {
		return Admission{}, &OverBudgetError{Tokens: 1, Need: d.Cost(1), Total: d.Total}
	}
	return Admission{Tokens: n, Bytes: d.Cost(n), Capped: n < d.Room}, nil
}

// largestFitting is the largest n in [1, hi] with cost(n) ≤ limit, or 0 when cost(1) > limit (binary
// search: cost does not decrease).
func largestFitting(hi int, limit int64, cost func(int) int64) int {
	lo := 0 // cost(lo) ≤ limit, with cost(0) taken as fitting
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if cost(mid) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
