package hfmodel

import "math"

// RoPE scaling types a checkpoint may declare and higgs implements. Others (dynamic NTK, longrope, llama3) are
// refused when the config is read: applying plain RoPE to a checkpoint trained with scaling silently degrades it.
const (
	RopeDefault = "default"
	RopeLinear  = "linear"
	RopeYaRN    = "yarn"
)

// RopeScaling is a checkpoint's RoPE scaling, read from rope_scaling or from rope_parameters (the transformers ≥ 5
// layout). The zero value (Type "") means plain RoPE.
type RopeScaling struct {
	// Type is "" for plain RoPE, RopeLinear or RopeYaRN.
	Type string
	// Factor is the context extension factor as written in the config; 0 for a YaRN block without one, whose
	// factor is then max_position_embeddings / original_max_position_embeddings.
	Factor float64
	// OriginalMaxPositions is original_max_position_embeddings, 0 when the config does not give it.
	OriginalMaxPositions int
	// BetaFast and BetaSlow bound YaRN's ramp (0: transformers' defaults 32 and 1).
	BetaFast, BetaSlow float64
	// AttentionFactor scales cos and sin (0: derived from Factor, Mscale and MscaleAllDim).
	AttentionFactor float64
	// Mscale and MscaleAllDim are DeepSeek-style attention-factor parameters (0: absent).
	Mscale, MscaleAllDim float64
	// Truncate rounds YaRN's correction range outwards to whole dimensions (the default).
	Truncate bool
}

// readRopeScaling reads the scaling from rope_parameters (pr, named pwhere) and from rope_scaling, refusing
// types higgs does not implement and two blocks that declare different scalings.
func readRopeScaling(r, pr *reader, pwhere string) RopeScaling {
	scaling, swhere := r.obj("rope_scaling")
	sr := &reader{scopes: []scope{{swhere, scaling}}}
	a, aok := ropeScalingFrom(r, pr, pwhere)
	b, bok := ropeScalingFrom(r, sr, swhere)
	switch {
	case aok && bok && a != b:
		r.addErr("%s and %s declare different RoPE scalings", pwhere, swhere)
		return a
	case aok:
		return a
	}
	return b
}

// ropeScalingFrom reads one block; ok is false when the block is absent or declares plain RoPE.
func ropeScalingFrom(r, sr *reader, where string) (s RopeScaling, ok bool) {
	defer func() {
		r.errs = append(r.errs, sr.errs...)
		sr.errs = nil
	}()
	if len(sr.scopes[0].obj) == 0 {
		return s, false
	}
	t := sr.str("rope_type", "")
	if t == "" {
		t = sr.str("type", RopeDefault)
	}
	switch t {
	case RopeDefault:
		return s, false
	case RopeLinear, RopeYaRN:
	default:
		r.unsupported("%s type %q (implemented: default, linear, yarn)", where, t)
		return s, false
	}
	s = RopeScaling{Type: t, Factor: sr.float("factor", 0), OriginalMaxPositions: sr.int("original_max_position_embeddings", 0),
		BetaFast: sr.float("beta_fast", 0), BetaSlow: sr.float("beta_slow", 0),
		AttentionFactor: sr.float("attention_factor", 0), Mscale: sr.float("mscale", 0),
		MscaleAllDim: sr.float("mscale_all_dim", 0), Truncate: sr.bool("truncate", true)}
	switch {
	case t == RopeYaRN && !sr.has("factor") && s.OriginalMaxPositions > 0:
		// transformers then derives the factor from the two context lengths, which must not shrink it.
		if mp := r.int("max_position_embeddings", 0); mp < s.OriginalMaxPositions {
			r.addErr("%s has no factor and max_position_embeddings %d is below original_max_position_embeddings %d",
				where, mp, s.OriginalMaxPositions)
		}
	case !(s.Factor > 0) || math.IsInf(s.Factor, 0) || (t == RopeYaRN && s.Factor < 1):
		r.addErr("%s.factor %v must be a finite number ≥ 1 (> 0 for linear)", where, s.Factor)
	}
	if sr.has("original_max_position_embeddings") && s.OriginalMaxPositions <= 0 {
		r.addErr("%s.original_max_position_embeddings %d must be positive", where, s.OriginalMaxPositions)
	}
	for _, v := range []struct {
		name string
		v    float64
	}{{"beta_fast", s.BetaFast}, {"beta_slow", s.BetaSlow}, {"attention_factor", s.AttentionFactor},
		{"mscale", s.Mscale}, {"mscale_all_dim", s.MscaleAllDim}} {
		if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
			r.addErr("%s.%s %v must be a finite number ≥ 0", where, v.name, v.v)
		}
	}
	return s, true
}

// Frequencies returns the inverse frequencies θ_i (i < dims/2) of RoPE over dims rotary dims with the given base,
// and the factor transformers multiplies cos and sin by (its attention_factor; 1 without scaling). maxPositions
// is the config's max_position_embeddings. It follows transformers' _compute_linear_scaling_rope_parameters and
// _compute_yarn_parameters in float64 (transformers rounds the frequencies to float32).
func (s RopeScaling) Frequencies(dims int, base float64, maxPositions int) (invFreq []float64, scale float64) {
	invFreq = make([]float64, dims/2)
	for i := range invFreq {
		invFreq[i] = 1 / math.Pow(base, float64(2*i)/float64(dims))
	}
	switch s.Type {
	case RopeLinear:
		for i := range invFreq {
			invFreq[i] /= s.Factor
		}
		return invFreq, 1
	case RopeYaRN:
		return s.yarn(invFreq, dims, base, maxPositions)
	}
	return invFreq, 1
}

// yarn blends interpolated (θ/factor) and extrapolated (θ) frequencies along a linear ramp between the
// dimensions that turn beta_fast and beta_slow times over the original context (original_max_position_embeddings,
// max_position_embeddings when absent). As in transformers since v4.56 (huggingface/transformers#40320), an
// explicit factor wins; only a block without one takes max_position_embeddings / original.
func (s RopeScaling) yarn(extra []float64, dims int, base float64, maxPositions int) ([]float64, float64) {
	factor := s.Factor
	orig := maxPositions
	if s.OriginalMaxPositions > 0 {
		orig = s.OriginalMaxPositions
	}
	if factor == 0 {
		factor = float64(maxPositions) / float64(orig)
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	attn := s.AttentionFactor
	if attn == 0 {
		if s.Mscale != 0 && s.MscaleAllDim != 0 {
			attn = mscale(factor, s.Mscale) / mscale(factor, s.MscaleAllDim)
		} else {
			attn = mscale(factor, 1)
		}
	}
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	correction := func(rotations float64) float64 {
		return float64(dims) * math.Log(float64(orig)/(rotations*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := correction(betaFast), correction(betaSlow)
	if s.Truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dims-1))
	if low == high {
		high += 0.001 // transformers' guard against a zero-width ramp
	}
	out := make([]float64, len(extra))
	for i, e := range extra {
		ramp := min(max((float64(i)-low)/(high-low), 0), 1) // 0: extrapolate (keep θ), 1: interpolate (θ/factor)
		out[i] = e/factor*ramp + e*(1-ramp)
	}
	return out, attn
}
