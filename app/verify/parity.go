package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// Parity tolerances (docs/model-math.md#tolerances: the engineering targets for fp32 vs fp32). Two weight variants of
// one model (f32 vs quantized) differ by more; pass looser tolerances for those.
const (
	DefaultParityMaxAbs = 1e-3 // max |Δlogit|
	DefaultParityMargin = 1e-3 // argmax must agree where A's top-2 margin exceeds this
	DefaultParityTapAbs = 1e-3 // max |Δ| of tapped hidden states
	// DefaultParityReplayAbs bounds max |Δp| between tape replay and recompute: fp32 tolerance, because a
	// backend may replay with another op order than its chunked forward (docs/model-math.md#tolerances); the CPU backend
	// is bit-exact.
	DefaultParityReplayAbs = 1e-5
)

// ParityOptions configure `higgs-verify parity`. Every tolerance is taken as given: 0 asks for bit-identical
// values (two CPU runs with different worker counts must pass that), so start from DefaultParityOptions.
type ParityOptions struct {
	Prompt    []ports.Token
	MaxTokens int // greedy continuation length, ≥ 1
	MaxAbs    float64
	Margin    float64
	TapAbs    float64
	// ReplayAbs bounds the probability difference after tape replay vs snapshot + recompute (0: bit-exact).
	ReplayAbs float64
}

// DefaultParityOptions are the CLI's defaults: a 16-token continuation and the fp32 tolerances of
// docs/model-math.md#tolerances.
func DefaultParityOptions() ParityOptions {
	return ParityOptions{MaxTokens: 16, MaxAbs: DefaultParityMaxAbs, Margin: DefaultParityMargin,
		TapAbs: DefaultParityTapAbs, ReplayAbs: DefaultParityReplayAbs}
}

// validate refuses options no comparison can honour.
func (o ParityOptions) validate() error {
	if o.MaxTokens < 1 {
		return fmt.Errorf("%w: parity max tokens %d must be ≥ 1", ErrBadInput, o.MaxTokens)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"max-abs", o.MaxAbs}, {"margin", o.Margin}, {"tap-abs", o.TapAbs}, {"replay-abs", o.ReplayAbs}} {
		if !(t.v >= 0) || math.IsInf(t.v, 1) {
			return fmt.Errorf("%w: parity tolerance %s %v must be a finite number ≥ 0", ErrBadInput, t.name, t.v)
		}
	}
	return nil
}

// ParitySide describes one side of the comparison.
type ParitySide struct {
	Model   string `json:"model"`
	Backend string `json:"backend"`
}

// ReplayCheck is the recurrent-rollback check of one side: a block is verified with a tape, rolled back to n
// committed positions by tape replay and, separately, by snapshot + recompute; the next-token distributions
// (T = 1) of the following forward must agree: MaxAbs is the largest probability difference.
type ReplayCheck struct {
	Supported bool    `json:"supported"`
	Recurrent bool    `json:"recurrent"`
	Cases     int     `json:"cases"`
	MaxAbs    float64 `json:"max_abs"`
	Pass      bool    `json:"pass"`
	Note      string  `json:"note,omitempty"`
}

// ParityResult is the JSON object `higgs-verify parity --json` prints.
type ParityResult struct {
	A              ParitySide    `json:"a"`
	B              ParitySide    `json:"b"`
	Tokens         []ports.Token `json:"tokens"`
	Positions      int           `json:"positions"`
	MaxAbs         float64       `json:"max_abs"`
	MaxRel         float64       `json:"max_rel"`
	ArgmaxAgree    int           `json:"argmax_agree"`
	ArgmaxChecked  int           `json:"argmax_checked"` // positions whose A top-2 margin exceeds the margin
	ArgmaxMismatch []int         `json:"argmax_mismatch"`
	TapLayers      []int         `json:"tap_layers"`
	TapMaxAbs      float64       `json:"tap_max_abs"`
	// NonFinite counts compared values that are NaN, or infinite on one side only; any fails the check (they
	// are left out of the maxima, which stay finite and JSON-encodable).
	NonFinite       int           `json:"non_finite"`
	TapsCompared    bool          `json:"taps_compared"`
	ContinuationA   []ports.Token `json:"continuation_a"`
	ContinuationB   []ports.Token `json:"continuation_b"`
	ContinuationOK  bool          `json:"continuation_match"`
	ReplayA         ReplayCheck   `json:"replay_a"`
	ReplayB         ReplayCheck   `json:"replay_b"`
	Tolerances      ParityOptions `json:"tolerances"`
	Pass            bool          `json:"pass"`
	Failures        []string      `json:"failures"`
	DrafterChecked  bool          `json:"drafter_checked"`
	SpecLosslessA   bool          `json:"spec_lossless_a,omitempty"`
	SpecLosslessB   bool          `json:"spec_lossless_b,omitempty"`
	DraftAgreement  int           `json:"draft_agreement,omitempty"`
	DraftComparable int           `json:"draft_comparable,omitempty"`
}

// Parity compares two loaded model sets position by position (see ParityResult). It returns ErrCheckFailed
// past the tolerances.
// It is one function because its checks read one another's results in order (logits, then greedy runs, then
// speculative runs and their drafts); each check is a short block with its own tolerance.
func Parity(ctx context.Context, a, b *models.Models, o ParityOptions) (ParityResult, error) {
	res := ParityResult{A: ParitySide{a.Name, a.Backend}, B: ParitySide{b.Name, b.Backend},
		Tokens: slices.Clone(o.Prompt), Tolerances: o, Failures: []string{}, ArgmaxMismatch: []int{}}
	if err := o.validate(); err != nil {
		return res, err
	}
	ia, ib := a.Target.Info(), b.Target.Info()
	if ia.VocabSize != ib.VocabSize || ia.HiddenSize != ib.HiddenSize || len(ia.LayerKinds) != len(ib.LayerKinds) {
		return res, fmt.Errorf("%w: the two models differ in shape (vocab %d/%d, hidden %d/%d, layers %d/%d)",
			ErrBadInput, ia.VocabSize, ib.VocabSize, ia.HiddenSize, ib.HiddenSize, len(ia.LayerKinds), len(ib.LayerKinds))
	}
	taps := make([]int, len(ia.LayerKinds))
	for i := range taps {
		taps[i] = i
	}
	if a.Drafter != nil {
		taps = a.Drafter.TapLayers()
	}
	res.TapLayers = taps
	la, ta, err := forwardLogits(ctx, a.Target, o.Prompt, taps)
	if err != nil {
		return res, fmt.Errorf("a: %w", err)
	}
	lb, tb, err := forwardLogits(ctx, b.Target, o.Prompt, taps)
	if err != nil {
		return res, fmt.Errorf("b: %w", err)
	}
	res.Positions = len(la)
	for i := range la {
		for v := range la[i] {
			d, ok := absDiff(float64(la[i][v]), float64(lb[i][v]))
			if !ok {
				res.NonFinite++
				continue
			}
			res.MaxAbs = max(res.MaxAbs, d)
			res.MaxRel = max(res.MaxRel, d/math.Max(math.Abs(float64(la[i][v])), 1e-6))
		}
		best, second := top2(la[i])
		if float64(la[i][best]-la[i][second]) > o.Margin {
			res.ArgmaxChecked++
			if bb, _ := top2(lb[i]); bb == best {
				res.ArgmaxAgree++
			} else {
				res.ArgmaxMismatch = append(res.ArgmaxMismatch, i)
			}
		}
	}
	// The tapped hidden states are compared only when both backends can expose them as float32 of one shape;
	// otherwise the check cannot be made, and that is reported rather than passed as a zero difference.
	fa, okA := ta.(ports.HostTaps)
	fb, okB := tb.(ports.HostTaps)
	var tapProblem string
	if okA && okB {
		da, ra, wa, errA := fa.Host()
		db, rb, wb, errB := fb.Host()
		if err := errors.Join(errA, errB); err != nil {
			tapProblem = fmt.Sprintf("tapped hidden states could not be read: %v", err)
		} else if ra != rb || wa != wb {
			tapProblem = fmt.Sprintf("tapped hidden states differ in shape (%d×%d vs %d×%d)", ra, wa, rb, wb)
		} else {
			for i := range min(len(da), len(db)) {
				d, ok := absDiff(float64(da[i]), float64(db[i]))
				if !ok {
					res.NonFinite++
					continue
				}
				res.TapMaxAbs = max(res.TapMaxAbs, d)
			}
			res.TapsCompared = true
		}
	} else {
		tapProblem = fmt.Sprintf("tapped hidden states are not readable as float32 (a: %v, b: %v)", okA, okB)
	}
	ga, _, err := runDecoder(ctx, a, GenerateOptions{Request: generation.Request{Prompt: o.Prompt, MaxTokens: o.MaxTokens, NoEOS: true}})
	if err != nil {
		return res, fmt.Errorf("a: %w", err)
	}
	gb, _, err := runDecoder(ctx, b, GenerateOptions{Request: generation.Request{Prompt: o.Prompt, MaxTokens: o.MaxTokens, NoEOS: true}})
	if err != nil {
		return res, fmt.Errorf("b: %w", err)
	}
	res.ContinuationA, res.ContinuationB = ga.Tokens, gb.Tokens
	_, res.ContinuationOK = firstDiff(ga.Tokens, gb.Tokens)
	if a.Drafter != nil && b.Drafter != nil {
		// The drafters on both sides: greedy speculative decoding must reproduce each side's greedy
		// continuation, and the drafts of equal-size blocks are compared (informational: near-ties may flip).
		sa, bsA, err := runDecoder(ctx, a, GenerateOptions{Request: generation.Request{Prompt: o.Prompt, MaxTokens: o.MaxTokens, NoEOS: true}, Speculative: true})
		if err != nil {
			return res, fmt.Errorf("a: %w", err)
		}
		sb, bsB, err := runDecoder(ctx, b, GenerateOptions{Request: generation.Request{Prompt: o.Prompt, MaxTokens: o.MaxTokens, NoEOS: true}, Speculative: true})
		if err != nil {
			return res, fmt.Errorf("b: %w", err)
		}
		res.DrafterChecked = true
		_, okA := firstDiff(sa.Tokens, ga.Tokens)
		_, okB := firstDiff(sb.Tokens, gb.Tokens)
		res.SpecLosslessA, res.SpecLosslessB = okA, okB
		if bsA == bsB {
			for i := range min(len(sa.Stats.Rounds), len(sb.Stats.Rounds)) {
				ra, rb := sa.Stats.Rounds[i].Block, sb.Stats.Rounds[i].Block
				if len(ra) != len(rb) || ra[0] != rb[0] {
					break
				}
				for j := 1; j < len(ra); j++ {
					res.DraftComparable++
					if ra[j] == rb[j] {
						res.DraftAgreement++
					}
				}
			}
		}
	}
	if res.ReplayA, err = replayCheck(ctx, a.Target, o); err != nil {
		return res, fmt.Errorf("a: %w", err)
	}
	if res.ReplayB, err = replayCheck(ctx, b.Target, o); err != nil {
		return res, fmt.Errorf("b: %w", err)
	}
	fail := func(format string, args ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, args...)) }
	if res.NonFinite > 0 {
		fail("%d logits or tapped values are NaN or infinite on one side only", res.NonFinite)
	}
	if res.MaxAbs > o.MaxAbs {
		fail("max |Δlogit| %.3g > %.3g", res.MaxAbs, o.MaxAbs)
	}
	if len(res.ArgmaxMismatch) > 0 {
		fail("argmax differs at %d of %d positions with top-2 margin > %g", len(res.ArgmaxMismatch), res.ArgmaxChecked, o.Margin)
	}
	if tapProblem != "" {
		fail("%s", tapProblem)
	}
	if res.TapMaxAbs > o.TapAbs {
		fail("max |Δtap| %.3g > %.3g", res.TapMaxAbs, o.TapAbs)
	}
	if !res.ContinuationOK {
		fail("greedy continuations differ")
	}
	if res.DrafterChecked && !(res.SpecLosslessA && res.SpecLosslessB) {
		fail("greedy speculative decoding differs from greedy decoding (a %v, b %v)", res.SpecLosslessA, res.SpecLosslessB)
	}
	for _, r := range []struct {
		side string
		c    ReplayCheck
	}{{"a", res.ReplayA}, {"b", res.ReplayB}} {
		if !r.c.Pass {
			fail("%s: tape replay vs recompute differ by %.3g (tolerance %.3g)", r.side, r.c.MaxAbs, o.ReplayAbs)
		}
	}
	res.Pass = len(res.Failures) == 0
	if !res.Pass {
		return res, fmt.Errorf("%w: %s", ErrCheckFailed, res.Failures[0])
	}
	return res, nil
}

func top2(x []float32) (int, int) {
	b, s := 0, -1
	for i := 1; i < len(x); i++ {
		switch {
		case x[i] > x[b]:
			b, s = i, b
		case s < 0 || x[i] > x[s]:
			s = i
		}
	}
	if s < 0 {
		s = b
	}
	return b, s
}

// replayCheck verifies a block of the prompt's greedy continuation with a tape, then for every n rolls back by
// tape replay in one session and by snapshot + restore + recompute in another, and compares the logits of the
// next forward. Targets without recurrent layers or without tape replay report Supported/Recurrent false.
func replayCheck(ctx context.Context, t ports.Target, o ParityOptions) (ReplayCheck, error) {
	rc := ReplayCheck{Pass: true, Recurrent: t.Info().HasRecurrent()}
	nonFinite := 0
	if !rc.Recurrent {
		rc.Note = "no recurrent layers"
		return rc, nil
	}
	const block = 6
	prompt := o.Prompt
	// The block: the prompt's first greedy tokens (any tokens would do; these are realistic).
	g, _, err := runDecoder(ctx, &models.Models{Target: t}, GenerateOptions{Request: generation.Request{Prompt: prompt, MaxTokens: block, NoEOS: true}})
	if err != nil {
		return rc, err
	}
	blk := g.Tokens
	open := func() (ports.Session, error) {
		s, err := t.NewSession(ctx, nil)
		if err != nil {
			return nil, err
		}
		if _, err := s.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1}); err != nil {
			_ = s.Close()
			return nil, err
		}
		return s, nil
	}
	// The next position's distribution (T = 1, no truncation) reflects every layer's state and is available
	// on every backend.
	vocab := t.Info().VocabSize
	next := func(s ports.Session, tok ports.Token) ([]float64, error) {
		fr, err := s.Forward(ctx, []ports.Token{tok}, ports.ForwardOptions{Rows: 1, Sampling: &ports.SamplingParams{Temperature: 1}})
		if err != nil {
			return nil, err
		}
		if len(fr.Dists) != 1 {
			return nil, fmt.Errorf("forward returned %d distributions, want 1", len(fr.Dists))
		}
		p := make([]float64, vocab)
		for v := range p {
			p[v] = fr.Dists[0].Prob(ports.Token(v))
		}
		return p, nil
	}
	for n := 1; n < len(blk); n++ {
		rs, err := open()
		if err != nil {
			return rc, err
		}
		tr, ok := rs.(ports.TapeReplayer)
		if !ok {
			_ = rs.Close()
			rc.Supported, rc.Note = false, "sessions cannot replay tapes"
			return rc, nil
		}
		rc.Supported = true
		pre := rs.Len()
		fr, err := rs.Forward(ctx, blk, ports.ForwardOptions{Rows: 1, RecordTape: true})
		if err == nil && fr.Tape == nil {
			err = errors.New("forward recorded no tape")
		}
		if err == nil {
			err = rs.TrimKV(pre + n)
		}
		if err == nil {
			err = tr.ReplayTape(ctx, fr.Tape, n)
		}
		var lr []float64
		if err == nil {
			lr, err = next(rs, blk[n])
		}
		_ = rs.Close()
		if err != nil {
			return rc, fmt.Errorf("tape replay to %d: %w", n, err)
		}
		cs, err := open()
		if err != nil {
			return rc, err
		}
		var lc []float64
		snap, err := cs.Snapshot()
		if err == nil {
			_, err = cs.Forward(ctx, blk, ports.ForwardOptions{Rows: 1})
		}
		if err == nil {
			err = cs.TrimKV(pre)
		}
		if err == nil {
			err = cs.Restore(snap)
		}
		if err == nil {
			_, err = cs.Forward(ctx, blk[:n], ports.ForwardOptions{Rows: 1})
		}
		if err == nil {
			lc, err = next(cs, blk[n])
		}
		_ = cs.Close()
		if err != nil {
			return rc, fmt.Errorf("recompute to %d: %w", n, err)
		}
		rc.Cases++
		for i := range lr {
			d, ok := absDiff(lr[i], lc[i])
			if !ok {
				nonFinite++
				continue
			}
			rc.MaxAbs = max(rc.MaxAbs, d)
		}
	}
	rc.Pass = rc.MaxAbs <= o.ReplayAbs && nonFinite == 0
	if nonFinite > 0 {
		rc.Note = fmt.Sprintf("%d probabilities NaN or infinite on one side only", nonFinite)
	}
	return rc, nil
}

// absDiff is |a − b| with ok false when the pair cannot be compared as numbers: a NaN on either side, or an
// infinity the other side does not share. Equal infinities (masked logits) compare as 0.
func absDiff(a, b float64) (float64, bool) {
	if a == b {
		return 0, true
	}
	d := math.Abs(a - b)
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return 0, false
	}
	return d, true
}
