package constrained

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

// Stats is what masking cost one generation.
type Stats struct {
	// Rows is the number of logit rows masked (one per verified position); Computed how many masks were
	// computed rather than taken from the per-state cache (by any request sharing the matcher meanwhile).
	Rows, Computed int
	// Time is the time spent computing masks, masking rows and choosing tokens from them.
	Time time.Duration
}

// Session is the masking ports.Session decorator (see the package comment). Wrap makes one.
type Session struct {
	inner ports.Session
	m     *grammar.Matcher
	vocab int
	// start is the prompt's length: positions from start on hold generated tokens.
	start int
	// states[k] is the grammar state after the first k generated tokens (positions start..start+k-1);
	// len(states) == Len() − start + 1 once the session holds the prompt.
	states []grammar.State
	// end is the position where the token budget ends (0: none): a row predicting position q has end − q
	// tokens left, and the document is closed within them (grammar.Matcher.Closing).
	end int
	// forced[k] says the budget took a token the grammar allowed out of the row predicting generated position
	// k (the rows of the positions held, as states).
	forced []bool
	clock  ports.Clock
	stats  Stats
}

// replayer is a constrained session over a backend that replays tapes (found by type assertion, as the
// decoder's rollback looks for it).
type replayer struct {
	*Session
	replay ports.TapeReplayer
}

func (c replayer) ReplayTape(ctx context.Context, tape ports.Tape, n int) error {
	return c.replay.ReplayTape(ctx, tape, n)
}

// Wrap wraps sess for a generation of prompt length promptLen under m, over logit rows of vocab entries,
// timing the masking on clock. end is the position where the generation's token budget ends (prompt
// length + max_tokens; 0: no budget): from where the tokens left reach the document's shortest completion,
// the rows allow only tokens after which it can still close, so the last token the budget allows ends a
// document that parses (see Forced). It returns the session to decode with and the decorator (for Stats); a nil m
// returns sess itself and a nil decorator.
func Wrap(sess ports.Session, m *grammar.Matcher, promptLen, end, vocab int, clock ports.Clock) (ports.Session, *Session) {
	if m == nil {
		return sess, nil
	}
	c := &Session{inner: sess, m: m, vocab: vocab, start: promptLen, end: end, states: []grammar.State{m.Start()}, clock: clock}
	if r, ok := sess.(ports.TapeReplayer); ok {
		return replayer{c, r}, c
	}
	return c, c
}

// Stats is what masking has cost so far.
func (c *Session) Stats() Stats { return c.stats }

// Forced reports whether the budget closed the document: it took a token the grammar allowed out of the row
// of one of the first n+1 generated positions (n tokens committed, and the row after them, where EOS came).
// A generation that ended at EOS then ended because of max_tokens, and its finish is "length".
func (c *Session) Forced(n int) bool {
	for k := 0; k <= n && k < len(c.forced); k++ {
		if c.forced[k] {
			return true
		}
	}
	return false
}

func (c *Session) Len() int                                   { return c.inner.Len() }
func (c *Session) Snapshot() (ports.RecurrentSnapshot, error) { return c.inner.Snapshot() }
func (c *Session) Restore(s ports.RecurrentSnapshot) error    { return c.inner.Restore(s) }
func (c *Session) Close() error                               { return c.inner.Close() }

// TrimKV trims the inner session and drops the grammar states of the positions rolled back.
func (c *Session) TrimKV(n int) error {
	if err := c.inner.TrimKV(n); err != nil {
		return err
	}
	if k := max(n-c.start, 0) + 1; k < len(c.states) {
		c.states = c.states[:k]
	}
	if len(c.forced) > len(c.states) {
		c.forced = c.forced[:len(c.states)]
	}
	return nil
}

// Forward feeds the block's generated tokens to the grammar, runs the inner forward for raw logits, and
// answers from the masked rows. Rows predicting a prompt position are left unmasked (the decoder ignores
// them); rows after a token the grammar forbids (a rejected draft) are left unmasked too, as acceptance
// has ended before them.
func (c *Session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	pos0 := c.inner.Len()
	t0 := c.clock.Now()
	held := len(c.states)
	for i, t := range tokens {
		p := pos0 + i
		if p < c.start {
			continue
		}
		k := p - c.start
		if k != len(c.states)-1 {
			c.states = c.states[:held]
			return ports.ForwardResult{}, fmt.Errorf("constraint: grammar holds %d generated positions, the block starts at %d", len(c.states)-1, k)
		}
		st := c.m.Advance(c.states[k], t)
		if err := st.Err(); err != nil {
			c.states = c.states[:held]
			return ports.ForwardResult{}, limitError(fmt.Errorf("constraint: the schema cannot be followed past %d generated tokens: %w", k+1, err))
		}
		c.states = append(c.states, st)
	}
	feedTime := c.clock.Now().Sub(t0)
	inner := opts
	inner.Logits, inner.Sampling = true, nil
	fr, err := c.inner.Forward(ctx, tokens, inner)
	if err != nil {
		// The block was not appended: the states stay those of the positions the session holds.
		c.states = c.states[:held]
		return fr, err
	}
	t1 := c.clock.Now()
	defer func() { c.stats.Time += feedTime + c.clock.Now().Sub(t1) }()
	rows := len(fr.Greedy)
	if len(fr.Logits) != rows*c.vocab {
		return fr, fmt.Errorf("constraint: backend returned %d logits for %d rows of %d", len(fr.Logits), rows, c.vocab)
	}
	if opts.Sampling != nil {
		fr.Dists = make([]ports.Distribution, rows)
	}
	first := pos0 + len(tokens) - rows // the position of the token row 0 follows
	before := c.m.Computed()
	for r := range rows {
		lg := fr.Logits[r*c.vocab : (r+1)*c.vocab]
		q := first + r + 1 // the position row r predicts
		if q >= c.start {
			if st := c.states[q-c.start]; !st.Dead() {
				if err := c.mask(ctx, lg, st, q); err != nil {
					return fr, err
				}
				c.stats.Rows++
			}
		}
		fr.Greedy[r] = sampling.Argmax(lg)
		if opts.Sampling != nil {
			d, err := sampling.New(lg, *opts.Sampling)
			if err != nil {
				return fr, fmt.Errorf("constraint: %w", err)
			}
			fr.Dists[r] = d
		}
	}
	c.stats.Computed += c.m.Computed() - before
	if !opts.Logits {
		fr.Logits = nil
	}
	return fr, nil
}

// mask sets the logits of the tokens st forbids at position q to −Inf.
func (c *Session) mask(ctx context.Context, lg []float32, st grammar.State, q int) error {
	left := 0
	if c.end > 0 {
		left = max(c.end-q, 1)
	}
	mk, forced, err := c.m.Closing(ctx, st, left)
	if err != nil {
		return limitError(fmt.Errorf("constraint: %w", err))
	}
	k := q - c.start
	for len(c.forced) <= k {
		c.forced = append(c.forced, false)
	}
	c.forced[k] = forced
	any := false
	neg := float32(math.Inf(-1))
	for w, bits := range mk {
		base := w * 64
		if bits == ^uint64(0) {
			any = true
			continue
		}
		if bits != 0 {
			any = true
		}
		for b := range 64 {
			if j := base + b; j < len(lg) && bits&(1<<uint(b)) == 0 {
				lg[j] = neg
			}
		}
	}
	if !any {
		return errors.New("constraint: no token of the vocabulary can continue the output here")
	}
	return nil
}
