package mlx

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
)

// parityFixtures are the tiny checkpoints both backends load: dense and hybrid, float and 4-bit.
func parityFixtures() map[string]fixture {
	q4 := &quant.Spec{Bits: 4, GroupSize: 32}
	return map[string]fixture{
		"qwen3 f32":         {spec: synth.TargetSpec{Family: "qwen3", Seed: 11, Layers: 3, Vocab: 96}},
		"qwen3_next f32":    {spec: synth.TargetSpec{Family: "qwen3_next", Seed: 12, Layers: 4, Vocab: 96}},
		"qwen3 q4":          {spec: synth.TargetSpec{Family: "qwen3", Seed: 13, Layers: 2, Vocab: 96}, quant: q4},
		"qwen3_next q4 g32": {spec: synth.TargetSpec{Family: "qwen3_next", Seed: 14, Layers: 4, Vocab: 96}, quant: q4},
	}
}

// logitGap compares MLX logits with a CPU distribution at temperature 1 (p = softmax(logits)): the CPU logits
// are log p + c for an unknown c, which the mean difference removes. It returns max |Δlogit|.
func logitGap(mlxLogits []float32, d ports.Distribution) float64 {
	V := len(mlxLogits)
	diff := make([]float64, V)
	mean := 0.0
	for v := range V {
		diff[v] = float64(mlxLogits[v]) - math.Log(d.Prob(ports.Token(v)))
		mean += diff[v] / float64(V)
	}
	worst := 0.0
	for _, x := range diff {
		worst = max(worst, math.Abs(x-mean))
	}
	return worst
}

var prompt = []ports.Token{1, 17, 42, 5, 88, 23, 9, 61, 33, 2, 70, 14}

// TestParityWithCPU loads each fixture on both backends and checks prefill logits (every position), greedy
// continuations token by token, and a verify block rolled back by tape replay.
func TestParityWithCPU(t *testing.T) {
	requireMLX(t)
	temp1 := &ports.SamplingParams{Temperature: 1}
	for name, f := range parityFixtures() {
		t.Run(name, func(t *testing.T) {
			dir := writeFixture(t, f)
			ct, err := cpu.Load(t.Context(), dir, cpu.LoadOptions{Threads: 1})
			require.NoError(t, err)
			t.Cleanup(func() { _ = ct.Close() })
			mt, err := Load(t.Context(), dir, LoadOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = mt.Close() })
			require.Equal(t, ct.Info().LayerKinds, mt.Info().LayerKinds)

			cs, err := ct.NewSession(t.Context(), nil)
			require.NoError(t, err)
			defer cs.Close()
			ms, err := mt.NewSession(t.Context(), nil)
			require.NoError(t, err)
			defer ms.Close()

			cr, err := cs.Forward(t.Context(), prompt, ports.ForwardOptions{Sampling: temp1})
			require.NoError(t, err)
			mr, err := ms.Forward(t.Context(), prompt, ports.ForwardOptions{Logits: true})
			require.NoError(t, err)
			logits := mr.Logits
			V := mt.Info().VocabSize
			worst := 0.0
			for r := range prompt {
				worst = max(worst, logitGap(logits[r*V:(r+1)*V], cr.Dists[r]))
			}
			t.Logf("prefill max |Δlogit| = %.3g", worst)
			assert.LessOrEqual(t, worst, 1e-3)
			assert.Equal(t, cr.Greedy, mr.Greedy)

			// Greedy continuation, one token at a time.
			var cGen, mGen []ports.Token
			cn, mn := cr.Greedy[len(prompt)-1], mr.Greedy[len(prompt)-1]
			for range 10 {
				cGen, mGen = append(cGen, cn), append(mGen, mn)
				c, err := cs.Forward(t.Context(), []ports.Token{cn}, ports.ForwardOptions{})
				require.NoError(t, err)
				m, err := ms.Forward(t.Context(), []ports.Token{mn}, ports.ForwardOptions{})
				require.NoError(t, err)
				cn, mn = c.Greedy[0], m.Greedy[0]
			}
			assert.Equal(t, cGen, mGen, "greedy continuations")

			// A verify block with tape, rolled back to 3 positions, then one more token on both.
			block := []ports.Token{cn, 4, 50, 7, 19, 66}
			pre := cs.Len()
			cb, err := cs.Forward(t.Context(), block, ports.ForwardOptions{RecordTape: true})
			require.NoError(t, err)
			fr, err := ms.Forward(t.Context(), block, ports.ForwardOptions{RecordTape: true})
			require.NoError(t, err)
			const keep = 3
			for _, s := range []ports.Session{cs, ms} {
				require.NoError(t, s.TrimKV(pre+keep))
			}
			if mt.Info().HasRecurrent() {
				require.NotNil(t, fr.Tape)
				require.NoError(t, cs.(ports.TapeReplayer).ReplayTape(t.Context(), cb.Tape, keep))
				require.NoError(t, ms.(ports.TapeReplayer).ReplayTape(t.Context(), fr.Tape, keep))
			}
			c, err := cs.Forward(t.Context(), []ports.Token{block[keep]}, ports.ForwardOptions{Sampling: temp1})
			require.NoError(t, err)
			m, err := ms.Forward(t.Context(), []ports.Token{block[keep]}, ports.ForwardOptions{Logits: true})
			require.NoError(t, err)
			l2 := m.Logits
			gap := logitGap(l2, c.Dists[0])
			t.Logf("after rollback max |Δlogit| = %.3g", gap)
			assert.LessOrEqual(t, gap, 1e-3)
			assert.Equal(t, c.Greedy, m.Greedy)
		})
	}
}
