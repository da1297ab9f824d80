package speculative

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// modelVariants covers the rollback paths: attention-only (KV trim), recurrent with tape replay, recurrent
// without (snapshot + recompute).
var modelVariants = []struct {
	name string
	cfg  portfake.Config
}{
	{"attention", portfake.Config{Layers: []ports.LayerKind{ports.LayerAttention, ports.LayerAttention}}},
	{"hybrid-tape", portfake.Config{Tape: true}},
	{"hybrid-snapshot", portfake.Config{}},
	{"recurrent-only", portfake.Config{Layers: []ports.LayerKind{ports.LayerRecurrent}, Tape: true}},
}

func TestGreedySpeculativeEqualsAutoregressive(t *testing.T) {
	const maxTokens = 40
	prompt := testPrompt(9, 32)
	for _, mv := range modelVariants {
		t.Run(mv.name, func(t *testing.T) {
			ar := newRig(t, mv.cfg, nil, portfake.DrafterConfig{})
			want, err := ar.generate(t, t.Context(), Config{BlockSize: 1, MaxTokens: maxTokens}, nil, prompt)
			require.NoError(t, err)
			require.Len(t, want.Tokens, maxTokens)
			oracle, err := ar.model.GreedyContinuation(prompt, maxTokens)
			require.NoError(t, err)
			require.Equal(t, oracle, want.Tokens, "plain decoding must follow the model's greedy continuation")

			for bs := 1; bs <= 16; bs++ {
				proposers := map[string]portfake.Proposer{
					"perfect": portfake.Perfect(ar.model),
					"random":  portfake.RandomTokens(32, uint64(bs)),
				}
				for k := 0; k < bs; k++ {
					proposers[fmt.Sprintf("match-%d", k)] = portfake.MatchThenDiverge(ar.model, k)
				}
				for name, p := range proposers {
					r := newRig(t, mv.cfg, p, portfake.DrafterConfig{})
					got, err := r.generate(t, t.Context(), Config{BlockSize: bs, MaxTokens: maxTokens}, nil, prompt)
					require.NoError(t, err, "bs=%d %s", bs, name)
					require.Equal(t, want.Tokens, got.Tokens, "bs=%d %s", bs, name)
					assert.Equal(t, FinishLength, got.Finish)
					for i, rs := range got.Stats.Rounds {
						require.Len(t, rs.Block, rs.BlockSize)
						require.LessOrEqual(t, rs.Committed, rs.Accepted+1, "round %d", i)
						if k, ok := matchK(name); ok && rs.BlockSize == bs && rs.Committed == rs.Accepted+1 {
							assert.Equal(t, min(k, bs-1), rs.Accepted, "bs=%d %s round %d", bs, name, i)
						}
					}
				}
			}
		})
	}
}

func matchK(name string) (int, bool) {
	var k int
	_, err := fmt.Sscanf(name, "match-%d", &k)
	return k, err == nil
}

// BenchmarkGenerate measures the decoder's own overhead per generation over the toy model (256 tokens,
// block 8, drafts matching 3 then diverging, tape replay).
func BenchmarkGenerate(b *testing.B) {
	m := portfake.MustNew(portfake.Config{Tape: true})
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 8, Propose: portfake.MatchThenDiverge(m, 3)})
	require.NoError(b, err)
	dec, err := New(Config{BlockSize: 8, MaxTokens: 256}, portfake.NewClock(1), nil)
	require.NoError(b, err)
	prompt := testPrompt(32, 32)
	noop := func([]ports.Token) error { return nil }
	for b.Loop() {
		sess, err := m.NewSession(b.Context(), dr.TapLayers())
		require.NoError(b, err)
		ds, err := dr.NewSession(b.Context())
		require.NoError(b, err)
		if _, err := dec.Generate(b.Context(), sess, ds, prompt, noop); err != nil {
			b.Fatal(err)
		}
	}
}
