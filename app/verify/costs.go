package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// DefaultCostRows are the verify block sizes bench --kernel-costs measures.
var DefaultCostRows = []int{2, 4, 8, 16}

// CostsOptions configure the kernel-cost measurement (bench --kernel-costs).
type CostsOptions struct {
	// Rows are the verify row counts measured against a 1-row decode (each ≥ 2).
	Rows []int
	// Context is the number of positions prefilled (and timed as the prefill) before the decode and verify
	// Forwards, which all run at this context length (≥ 1).
	Context int
	// Repeats is the number of measured rounds (≥ 1); one discarded warm-up round runs first.
	Repeats int
}

// VerifyCost is one verify block size: a Forward of Rows positions (all rows' outputs returned) against a
// 1-row decode Forward at the same context length.
type VerifyCost struct {
	Rows int     `json:"rows"`
	Ms   float64 `json:"ms"`
	// DecodeSteps is the median over rounds of this Forward's time divided by the same round's 1-row decode.
	DecodeSteps float64 `json:"decode_steps"`
	// GFLOPPerS is 2·params·Rows over the time.
	GFLOPPerS float64 `json:"gflop_per_s"`
}

// KernelCosts is the "costs" object of bench --json: what the target's forward passes cost on this machine,
// measured through the session port only (Forward, TrimKV, Snapshot/Restore), so any backend reports it.
type KernelCosts struct {
	Backend           string             `json:"backend"`
	CPU               models.CPUFeatures `json:"cpu"`
	ContextTokens     int                `json:"context_tokens"`
	Repeats           int                `json:"repeats"`
	PrefillTokensPerS float64            `json:"prefill_tokens_per_s"`
	DecodeMsPerToken  float64            `json:"decode_ms_per_token"`
	Verify            []VerifyCost       `json:"verify"`
	// WeightBytes and Params are per decoded token (ReadWeightFootprint); BandwidthGBPerS is WeightBytes over the
	// decode time and GFLOPPerS 2·Params over it.
	WeightBytes     int64   `json:"weight_bytes"`
	Params          int64   `json:"params"`
	BandwidthGBPerS float64 `json:"bandwidth_gb_per_s"`
	GFLOPPerS       float64 `json:"gflop_per_s"`
}

// MeasureCosts prefills Context tokens (cycled from the prompts) and then times, round by round and interleaved,
// a 1-row decode Forward and a Forward of each of o.Rows rows, bringing the session back to the same context
// length after each (TrimKV plus Restore of the recurrent snapshot), and reports medians.
// It is one function because the interleaving is the measurement: splitting the rounds apart would hide
// which timings were taken side by side.
func MeasureCosts(ctx context.Context, m *models.Models, prompts [][]ports.Token, o CostsOptions) (KernelCosts, error) {
	if o.Context < 1 || o.Repeats < 1 || len(o.Rows) == 0 {
		return KernelCosts{}, fmt.Errorf("%w: kernel costs need --cost-context %d ≥ 1, --cost-repeats %d ≥ 1 and at least one row count",
			ErrBadInput, o.Context, o.Repeats)
	}
	for _, k := range o.Rows {
		if k < 2 {
			return KernelCosts{}, fmt.Errorf("%w: --cost-rows %d: a verify has at least 2 rows", ErrBadInput, k)
		}
	}
	var pool []ports.Token
	for _, p := range prompts {
		pool = append(pool, p...)
	}
	if len(pool) == 0 {
		return KernelCosts{}, fmt.Errorf("%w: kernel costs need a non-empty prompt", ErrBadInput)
	}
	maxRows := slices.Max(o.Rows)
	toks := make([]ports.Token, o.Context+maxRows)
	for i := range toks {
		toks[i] = pool[i%len(pool)]
	}
	prefix, block := toks[:o.Context], toks[o.Context:]

	fp, err := ReadWeightFootprint(m.TargetDir)
	if err != nil {
		return KernelCosts{}, err
	}
	// Prefill: one discarded warm-up, then Repeats fresh sessions; the last one stays for decode and verify.
	var prefill []float64
	var sess ports.Session
	closeSess := func() error {
		if sess == nil {
			return nil
		}
		err := sess.Close()
		sess = nil
		return err
	}
	defer func() { _ = closeSess() }()
	for r := 0; r <= o.Repeats; r++ {
		if err := closeSess(); err != nil {
			return KernelCosts{}, fmt.Errorf("kernel costs: close session: %w", err)
		}
		if sess, err = m.Target.NewSession(ctx, nil); err != nil {
			return KernelCosts{}, fmt.Errorf("kernel costs: new session: %w", err)
		}
		t0 := time.Now()
		if _, err := sess.Forward(ctx, prefix, ports.ForwardOptions{Rows: 1}); err != nil {
			return KernelCosts{}, fmt.Errorf("kernel costs: prefill %d tokens: %w", len(prefix), err)
		}
		if r > 0 {
			prefill = append(prefill, float64(len(prefix))/time.Since(t0).Seconds())
		}
	}
	// An attention-only target has no recurrent state: TrimKV alone returns it to the context length.
	snap, err := sess.Snapshot()
	if errors.Is(err, errors.ErrUnsupported) {
		snap, err = nil, nil
	}
	if err != nil {
		return KernelCosts{}, fmt.Errorf("kernel costs: snapshot: %w", err)
	}
	timed := func(k int) (float64, error) {
		t0 := time.Now()
		_, err := sess.Forward(ctx, block[:k], ports.ForwardOptions{Rows: k})
		d := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("kernel costs: forward %d rows at context %d: %w", k, o.Context, err)
		}
		if err := sess.TrimKV(o.Context); err != nil {
			return 0, fmt.Errorf("kernel costs: trim to %d: %w", o.Context, err)
		}
		if snap != nil {
			if err := sess.Restore(snap); err != nil {
				return 0, fmt.Errorf("kernel costs: restore: %w", err)
			}
		}
		return d.Seconds() * 1000, nil
	}
	decode := make([]float64, 0, o.Repeats)
	ms := make([][]float64, len(o.Rows))
	steps := make([][]float64, len(o.Rows))
	for r := 0; r <= o.Repeats; r++ {
		d, err := timed(1)
		if err != nil {
			return KernelCosts{}, err
		}
		for i, k := range o.Rows {
			t, err := timed(k)
			if err != nil {
				return KernelCosts{}, err
			}
			if r > 0 { // round 0 is the warm-up
				ms[i] = append(ms[i], t)
				steps[i] = append(steps[i], t/d)
			}
		}
		if r > 0 {
			decode = append(decode, d)
		}
	}
	kc := KernelCosts{Backend: m.Backend, CPU: models.DetectCPUFeatures(), ContextTokens: o.Context, Repeats: o.Repeats,
		PrefillTokensPerS: median(prefill), DecodeMsPerToken: median(decode), WeightBytes: fp.Bytes, Params: fp.Params}
	perS := func(msv float64) float64 { return 1000 / msv }
	kc.BandwidthGBPerS = float64(fp.Bytes) * perS(kc.DecodeMsPerToken) / 1e9
	kc.GFLOPPerS = 2 * float64(fp.Params) * perS(kc.DecodeMsPerToken) / 1e9
	for i, k := range o.Rows {
		t := median(ms[i])
		kc.Verify = append(kc.Verify, VerifyCost{Rows: k, Ms: t, DecodeSteps: median(steps[i]),
			GFLOPPerS: 2 * float64(fp.Params) * float64(k) * perS(t) / 1e9})
	}
	// A timer too coarse for the model gives zero durations; say so rather than print Inf.
	figures := []float64{kc.PrefillTokensPerS, kc.BandwidthGBPerS, kc.GFLOPPerS}
	for _, v := range kc.Verify {
		figures = append(figures, v.DecodeSteps, v.GFLOPPerS)
	}
	for _, v := range figures {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return kc, errors.New("kernel costs: a measured duration was zero (timer resolution); use a longer --cost-context or a larger model")
		}
	}
	return kc, nil
}
