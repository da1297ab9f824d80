package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// cpuTapLogits computes every position's raw logits on a CPU target whose sessions do not expose them
// (RawLogitsSession): it taps the residual stream after the last layer, applies the final RMSNorm read from
// the checkpoint (with the zero-centred (1+w) form where the checkpoint stores it so, MODEL-REFERENCE §2.2)
// and the target's own LM head. It also returns the taps of tapLayers. Tests check it against the
// transformers goldens and against the session's greedy tokens.
func cpuTapLogits(ctx context.Context, t *cpu.Target, tokens []ports.Token, tapLayers []int) ([][]float32, ports.Taps, error) {
	info := t.Info()
	L, H, V := len(info.LayerKinds), info.HiddenSize, info.VocabSize
	norm, err := finalNorm(info.Name, t.Config())
	if err != nil {
		return nil, nil, err
	}
	taps := append(append([]int(nil), tapLayers...), L-1)
	sess, err := t.NewSession(ctx, taps)
	if err != nil {
		return nil, nil, fmt.Errorf("open session: %w", err)
	}
	defer sess.Close()
	fr, err := sess.Forward(ctx, tokens, ports.ForwardOptions{Taps: true})
	if err != nil {
		return nil, nil, fmt.Errorf("forward: %w", err)
	}
	ft, ok := fr.Taps.(interface {
		Float32() ([]float32, int, int)
	})
	if !ok {
		return nil, nil, fmt.Errorf("taps %T are not float32", fr.Taps)
	}
	data, rows, width := ft.Float32()
	if rows != len(tokens) || width != len(taps)*H {
		return nil, nil, fmt.Errorf("forward returned %d×%d taps, want %d×%d", rows, width, len(tokens), len(taps)*H)
	}
	eps := float32(t.Config().RMSNormEps)
	hidden := make([]float32, rows*H)
	kept := make([]float32, 0, rows*len(tapLayers)*H)
	for r := range rows {
		row := data[r*width : (r+1)*width]
		kept = append(kept, row[:len(tapLayers)*H]...)
		// The same kernel the target's own final norm uses.
		kernel.RMSNorm(hidden[r*H:(r+1)*H], row[len(tapLayers)*H:], norm, eps)
	}
	flat := make([]float32, rows*V)
	if err := t.LMHead(flat, hidden, rows); err != nil {
		return nil, nil, err
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = flat[r*V : (r+1)*V]
	}
	var tp ports.Taps
	if len(tapLayers) > 0 {
		tp = &floatTaps{data: kept, rows: rows, width: len(tapLayers) * H}
	}
	return out, tp, nil
}

// finalNorm reads the final norm weight of the checkpoint in dir, with +1 folded in when the checkpoint stores
// zero-centred norms (HF-layout hybrids: not quantized, no switch_mlp experts, conv1d stored [C,1,Kc]).
func finalNorm(dir string, cfg *hfmodel.TextConfig) ([]float32, error) {
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var normName string
	zeroCentred := cfg.Hybrid() && cfg.Quantization == nil
	for _, n := range st.Names() {
		c, keep := hfmodel.NormaliseName(n)
		if !keep {
			continue
		}
		switch {
		case c == "norm.weight":
			normName = n
		case strings.Contains(c, ".switch_mlp."):
			zeroCentred = false
		case strings.HasSuffix(c, ".linear_attn.conv1d.weight"):
			if tt, err := st.Tensor(n); err == nil && len(tt.Shape) == 3 && tt.Shape[2] == 1 && tt.Shape[1] != 1 {
				zeroCentred = false
			}
		}
	}
	if normName == "" {
		return nil, fmt.Errorf("%s: no final norm.weight", dir)
	}
	tt, err := st.Tensor(normName)
	if err != nil {
		return nil, err
	}
	w, err := tt.Float32()
	if err != nil {
		return nil, err
	}
	if zeroCentred {
		for i := range w {
			w[i]++
		}
	}
	return w, nil
}

// floatTaps is a plain float32 tap matrix (rows × width).
type floatTaps struct {
	data        []float32
	rows, width int
}

func (t *floatTaps) Rows() int { return t.rows }

func (t *floatTaps) Slice(n int) ports.Taps {
	n = min(max(n, 0), t.rows)
	return &floatTaps{data: t.data[:n*t.width], rows: n, width: t.width}
}

func (t *floatTaps) Detach() ports.Taps {
	return &floatTaps{data: append([]float32(nil), t.data...), rows: t.rows, width: t.width}
}

// Float32 exposes the matrix (read only).
func (t *floatTaps) Float32() ([]float32, int, int) { return t.data, t.rows, t.width }
