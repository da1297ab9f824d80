package cpu

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/internal/golden"
	"github.com/higgs-go/higgs/ports"
)

// A check against transformers' numbers already committed (golden.json's logits), made on the CPU here
// without the embedding goldens: the pooled hidden state of every prefix of the golden prompt, put through
// the LM head, gives transformers' logits for that prefix's last position (max |Δ| ≤ 1e-3, TestGoldens'
// bound). A pooled row that were not the final norm's output at the last position would not.
func TestLastHiddenAgainstTransformersLogits(t *testing.T) {
	for _, gt := range golden.Targets(t) {
		t.Run(gt.Name, func(t *testing.T) {
			tg, err := Load(t.Context(), gt.Dir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			defer tg.Close()
			V := tg.m.Arch.Vocab
			want := golden.Floats(t, gt.Dir, gt.Case.Logits)
			worst := 0.0
			for _, n := range []int{1, 5, len(gt.Case.Prompt)} {
				h, err := tg.LastHidden(t.Context(), gt.Case.Prompt[:n])
				require.NoError(t, err)
				got := make([]float32, V)
				require.NoError(t, tg.LMHead(got, h, 1))
				for v := range V {
					worst = math.Max(worst, math.Abs(float64(got[v])-float64(want[(n-1)*V+v])))
				}
			}
			t.Logf("max |Δlogit| through the pooled row = %.3g", worst)
			assert.LessOrEqual(t, worst, 1e-3)
		})
	}
}

// embedGolden is a case's embed.json, written by tools/goldens/make_embed_goldens.py with transformers.
type embedGolden struct {
	Sequences  [][]ports.Token `json:"sequences"`
	LastHidden [][]float64     `json:"last_hidden"`
	Embedding  [][]float64     `json:"embedding"`
	MRLDims    int             `json:"mrl_dims"`
	MRL        [][]float64     `json:"mrl_32"`
}

// The embedding goldens: transformers' final-norm row at the last position (relative to its largest value,
// ≤ 1e-4, TestGoldens' bound on hidden states), and that row L2-normalised, whole and truncated to 32 values
// (each value within 1e-4). The goldens come from tools/goldens/make_embed_goldens.py, which needs
// transformers (committed for every Hugging Face-layout case); a case without embed.json is skipped saying so.
func TestEmbedGoldens(t *testing.T) {
	for _, gt := range golden.Targets(t) {
		t.Run(gt.Name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(gt.Dir, "embed.json"))
			if errors.Is(err, fs.ErrNotExist) {
				// make_embed_goldens.py writes one for every Hugging Face-layout case; transformers cannot load the
				// MLX-quantized ones, whose pooled rows TestLastHiddenAgainstTransformersLogits checks instead.
				t.Skipf("no %s/embed.json: an MLX-quantized case, which transformers cannot load (TestLastHiddenAgainstTransformersLogits covers it)", gt.Name)
			}
			require.NoError(t, err)
			var g embedGolden
			require.NoError(t, json.Unmarshal(raw, &g))
			require.Len(t, g.LastHidden, len(g.Sequences))
			tg, err := Load(t.Context(), gt.Dir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			defer tg.Close()
			for i, seq := range g.Sequences {
				h, err := tg.LastHidden(t.Context(), seq)
				require.NoError(t, err)
				require.Len(t, h, len(g.LastHidden[i]))
				var d, scale float64
				for j, w := range g.LastHidden[i] {
					d = math.Max(d, math.Abs(w-float64(h[j])))
					scale = math.Max(scale, math.Abs(w))
				}
				assert.LessOrEqual(t, d/math.Max(scale, 1), 1e-4, "sequence %d: last hidden", i)
				for name, c := range map[string]struct {
					want []float64
					dims int
				}{"embedding": {g.Embedding[i], len(h)}, "mrl": {g.MRL[i], g.MRLDims}} {
					got := l2(h[:c.dims])
					require.Len(t, c.want, len(got))
					for j := range got {
						assert.InDelta(t, c.want[j], got[j], 1e-4, "sequence %d: %s value %d", i, name, j)
					}
				}
			}
		})
	}
}

// l2 is v over its L2 norm, in float64 (the test's own, independent of app/serve's).
func l2(v []float32) []float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	n := math.Max(math.Sqrt(ss), 1e-12)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) / n
	}
	return out
}
