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

// TestEmittedChunksStayValid keeps every emitted slice without copying it (as Generate's doc allows) and checks,
// after generation, that they still spell the result: later rounds must not overwrite earlier chunks.
func TestEmittedChunksStayValid(t *testing.T) {
	prompt := testPrompt(9, 32)
	for _, mv := range modelVariants {
		t.Run(mv.name, func(t *testing.T) {
			m := portfake.MustNew(mv.cfg)
			r := newRig(t, mv.cfg, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{})
			dec, err := New(Config{BlockSize: 6, MaxTokens: 37}, portfake.NewClock(1), nil)
			require.NoError(t, err)
			var kept [][]ports.Token
			res, err := dec.Generate(t.Context(), r.sess, r.draftSession(), prompt, func(chunk []ports.Token) error {
				kept = append(kept, chunk)
				return nil
			})
			require.NoError(t, err)
			require.Greater(t, len(kept), 2)
			var all []ports.Token
			for _, c := range kept {
				all = append(all, c...)
			}
			assert.Equal(t, res.Tokens, all)
			want, err := m.GreedyContinuation(prompt, 37)
			require.NoError(t, err)
			assert.Equal(t, want, all)
		})
	}
}
