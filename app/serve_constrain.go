package app

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

// Constrained decoding composes with speculation without the domain knowing: the decoder's target session
// is wrapped by one that asks the backend for raw logits, masks every returned row with the grammar state
// reached by the tokens before it (the committed ones and the block's own), and computes the greedy token
// and the distribution from the masked row. A drafted token the grammar forbids then never equals the
// target's choice, so acceptance ends there and the bonus token comes from the masked distribution: greedy
// constrained speculative decoding is plain constrained greedy decoding token for token, and sampling is
// lossless with respect to the masked distribution.

// vocabCache builds an engine's grammar vocabulary once, on the first constrained request, and keeps the
// matchers of recent constraints: a Matcher caches masks per grammar state, so requests repeating a schema
// (an agent's tools, an application's response format) reuse the masks computed before.
type vocabCache struct {
	once  sync.Once
	vocab *grammar.Vocab
	err   error

	mu       sync.Mutex
	matchers map[string]*grammar.Matcher
}

// maxMatchers bounds the constraints whose matchers an engine keeps.
const maxMatchers = 64

// constraintKey identifies everything a constraint's grammar is compiled from.
func constraintKey(c *ports.Constraint, think, inThink bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%t|%t|%t|%q|", c.Kind, c.Parallel, think, inThink, c.Schema)
	for _, t := range c.Tools {
		fmt.Fprintf(&b, "%q|%t|%q|", t.Name, t.Strict, t.Parameters)
	}
	return b.String()
}

// grammarVocab is the engine's vocabulary as byte strings over the model's logit rows (ids the tokenizer
// does not know, and special tokens, have none: only EOS may end a sentence).
func grammarVocab(l *loaded) (*grammar.Vocab, error) {
	l.vocab.once.Do(func() {
		tb, ok := l.Tokenizer.(ports.TokenBytes)
		if !ok {
			l.vocab.err = fmt.Errorf("this model's tokenizer (%T) does not expose its token bytes, which constrained decoding needs", l.Tokenizer)
			return
		}
		l.vocab.vocab = buildVocab(tb, l.info.VocabSize, l.eos)
	})
	return l.vocab.vocab, l.vocab.err
}

// buildVocab is the byte strings of ids [0, size); EOS ids get none even when they are ordinary tokens, so
// that the grammar never lets one be spelt inside a string (it would end the generation there).
func buildVocab(tb ports.TokenBytes, size int, eos map[ports.Token]bool) *grammar.Vocab {
	bytes := make([][]byte, size)
	for id := range size {
		if eos[ports.Token(id)] {
			continue
		}
		if b, special, ok := tb.TokenBytes(ports.Token(id)); ok && !special && len(b) > 0 {
			bytes[id] = b
		}
	}
	return grammar.NewVocab(bytes)
}

// constraintGrammar compiles a request's constraint. think says the output may start with a reasoning block
// (the prompt opened one, inThink, or the request turned thinking on), which the grammar lets through before
// the constrained part; otherwise the constrained part starts at the first token.
func constraintGrammar(c *ports.Constraint, think, inThink bool) (*grammar.Grammar, error) {
	var g *grammar.Grammar
	var err error
	switch c.Kind {
	case ports.ConstrainJSONObject:
		g = grammar.JSONObject()
	case ports.ConstrainJSONSchema:
		g, err = grammar.CompileSchema(c.Schema)
	case ports.ConstrainToolCall, ports.ConstrainStrictTools:
		var tools []grammar.Tool
		if tools, err = grammarTools(c.Tools); err != nil {
			break
		}
		if c.Kind == ports.ConstrainStrictTools {
			// Free text holds the reasoning too: no reasoning prefix is needed.
			return grammar.StrictTools(tools, grammar.Hermes)
		}
		g, err = grammar.ToolCalls(tools, grammar.Hermes, c.Parallel)
	default:
		return nil, fmt.Errorf("unknown constraint kind %d", c.Kind)
	}
	if err != nil {
		return nil, err
	}
	if think {
		g = g.AfterReasoning(thinkOpen, thinkClose, inThink)
	}
	return g, nil
}

// grammarTools keeps each tool's schema where the subset can express it; a strict tool's schema that it
// cannot is an error, a lenient one's arguments are held to be a JSON object only.
func grammarTools(in []ports.ConstraintTool) ([]grammar.Tool, error) {
	out := make([]grammar.Tool, 0, len(in))
	for _, t := range in {
		gt := grammar.Tool{Name: t.Name, Parameters: t.Parameters}
		if t.Parameters != nil {
			if _, err := grammar.CompileSchema(t.Parameters); err != nil {
				if t.Strict {
					return nil, fmt.Errorf("tool %q: %w", t.Name, err)
				}
				gt.Parameters = grammar.AnyArguments
			}
		}
		out = append(out, gt)
	}
	return out, nil
}

// prepareConstraint compiles req's constraint for l into a matcher (nil without a constraint); a constraint
// the subset cannot express is a request error naming its field.
func prepareConstraint(l *loaded, req ports.GenerateRequest, think, inThink bool) (*grammar.Matcher, error) {
	c := req.Constraint
	if c == nil {
		return nil, nil
	}
	param := c.Param
	key := constraintKey(c, think, inThink)
	l.vocab.mu.Lock()
	m := l.vocab.matchers[key]
	l.vocab.mu.Unlock()
	if m != nil {
		return m, nil
	}
	g, err := constraintGrammar(c, think, inThink)
	if err != nil {
		// A *grammar.SchemaError names the keyword and where it is; adapters prefix the field.
		return nil, invalidCause(param, err)
	}
	v, err := grammarVocab(l)
	if err != nil {
		return nil, invalidCause(param, err)
	}
	eos := make([]ports.Token, 0, len(l.eos))
	for t := range l.eos {
		if int(t) < l.info.VocabSize {
			eos = append(eos, t)
		}
	}
	if len(eos) == 0 {
		return nil, invalid(param, "this model has no end-of-sequence token, so a constrained answer could never end")
	}
	if m, err = grammar.NewMatcher(g, v, eos); err != nil {
		return nil, fmt.Errorf("constraint: %w", err)
	}
	l.vocab.mu.Lock()
	if l.vocab.matchers == nil || len(l.vocab.matchers) >= maxMatchers {
		l.vocab.matchers = map[string]*grammar.Matcher{}
	}
	l.vocab.matchers[key] = m
	l.vocab.mu.Unlock()
	return m, nil
}

// requestCause is a request error that keeps its cause in the chain: errors.As finds the
// *ports.RequestError (the adapters' 400 and its parameter) and the cause alike (a *grammar.SchemaError).
type requestCause struct {
	req   *ports.RequestError
	cause error
}

func (e *requestCause) Error() string   { return e.req.Error() }
func (e *requestCause) Unwrap() []error { return []error{e.req, e.cause} }

// invalidCause is the request error for param whose message is err's.
func invalidCause(param string, err error) error {
	return &requestCause{req: &ports.RequestError{Param: param, Message: err.Error()}, cause: err}
}

// limitError turns a grammar's stack limit into a request error (the schema, not the server, is at fault:
// a 400 when no part of the answer was sent yet); other errors pass unchanged.
func limitError(err error) error {
	if errors.Is(err, grammar.ErrTooManyStacks) {
		return invalidCause("", err)
	}
	return err
}

// MaskStats is what masking cost one generation.
type MaskStats struct {
	// Rows is the number of logit rows masked (one per verified position); Computed how many masks were
	// computed rather than taken from the per-state cache (by any request sharing the matcher meanwhile).
	Rows, Computed int
	// Time is the time spent computing masks, masking rows and choosing tokens from them.
	Time time.Duration
}

// constrained is the masking ports.Session decorator (see the top of this file).
type constrained struct {
	inner ports.Session
	m     *grammar.Matcher
	vocab int
	// start is the prompt's length: positions from start on hold generated tokens.
	start int
	// states[k] is the grammar state after the first k generated tokens (positions start..start+k-1);
	// len(states) == Len() − start + 1 once the session holds the prompt.
	states []grammar.State
	clock  ports.Clock
	stats  MaskStats
}

// constrainedReplayer is a constrained session over a backend that replays tapes (found by type assertion,
// as the decoder's rollback looks for it).
type constrainedReplayer struct {
	*constrained
	replay ports.TapeReplayer
}

func (c constrainedReplayer) ReplayTape(ctx context.Context, tape ports.Tape, n int) error {
	return c.replay.ReplayTape(ctx, tape, n)
}

// constrain wraps sess for a generation of prompt length promptLen under m; nil m returns sess itself.
func constrain(sess ports.Session, m *grammar.Matcher, promptLen, vocab int, clock ports.Clock) (ports.Session, *constrained) {
	if m == nil {
		return sess, nil
	}
	c := &constrained{inner: sess, m: m, vocab: vocab, start: promptLen, states: []grammar.State{m.Start()}, clock: clock}
	if r, ok := sess.(ports.TapeReplayer); ok {
		return constrainedReplayer{c, r}, c
	}
	return c, c
}

func (c *constrained) Len() int                                   { return c.inner.Len() }
func (c *constrained) Snapshot() (ports.RecurrentSnapshot, error) { return c.inner.Snapshot() }
func (c *constrained) Restore(s ports.RecurrentSnapshot) error    { return c.inner.Restore(s) }
func (c *constrained) Close() error                               { return c.inner.Close() }

func (c *constrained) TrimKV(n int) error {
	if err := c.inner.TrimKV(n); err != nil {
		return err
	}
	if k := max(n-c.start, 0) + 1; k < len(c.states) {
		c.states = c.states[:k]
	}
	return nil
}

// Forward feeds the block's generated tokens to the grammar, runs the inner forward for raw logits, and
// answers from the masked rows. Rows predicting a prompt position are left unmasked (the decoder ignores
// them); rows after a token the grammar forbids (a rejected draft) are left unmasked too, as acceptance
// has ended before them.
func (c *constrained) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
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
				if err := c.mask(ctx, lg, st); err != nil {
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

// mask sets the logits of the tokens st forbids to −Inf.
func (c *constrained) mask(ctx context.Context, lg []float32, st grammar.State) error {
	mk, err := c.m.Allowed(ctx, st)
	if err != nil {
		return limitError(fmt.Errorf("constraint: %w", err))
	}
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
