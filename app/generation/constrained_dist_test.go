package generation

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/constrained"
	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// distVocab is a small byte-level vocabulary over which an enum's strings can be spelt several ways; id 7 is
// EOS.
var distVocab = [][]byte{[]byte(`"`), []byte("a"), []byte("b"), []byte(`"a`), []byte(`b"`), []byte("ab"), []byte(`"b`), nil}

const distEOS = ports.Token(7)

// exactConstrained enumerates every token sequence the grammar lets the toy model produce after prompt,
// with its probability under the masked distribution (softmax at temperature 1 over the allowed tokens).
func exactConstrained(t *testing.T, model *portfake.Model, m *grammar.Matcher, prompt []ports.Token) map[string]float64 {
	out := map[string]float64{}
	var rec func(hist []ports.Token, st grammar.State, p float64)
	rec = func(hist []ports.Token, st grammar.State, p float64) {
		lg, err := model.Logits(hist)
		require.NoError(t, err)
		row := make([]float32, len(lg))
		for i, v := range lg {
			row[i] = float32(v)
		}
		mk, err := m.Allowed(context.Background(), st)
		require.NoError(t, err)
		for i := range row {
			if !mk.Has(int32(i)) {
				row[i] = float32(math.Inf(-1))
			}
		}
		d, err := sampling.New(row, ports.SamplingParams{Temperature: 1})
		require.NoError(t, err)
		for _, tok := range d.Support() {
			q := p * d.Prob(tok)
			next := append(slices.Clone(hist), tok)
			if tok == distEOS {
				out[seqKey(next[len(prompt):])] += q
				continue
			}
			rec(next, m.Advance(st, tok), q)
		}
	}
	rec(prompt, m.Start(), 1)
	return out
}

func seqKey(toks []ports.Token) string {
	var sb strings.Builder
	for _, t := range toks {
		sb.WriteByte(byte('0' + t))
	}
	return sb.String()
}

// TestConstrainedSamplingHasTheMaskedDistribution: speculative sampling through the masking session, with a
// drafter that proposes random tokens (most of them forbidden), draws whole outputs with the masked
// distribution's probabilities (chi-square over every possible output), under both verification rules.
func TestConstrainedSamplingHasTheMaskedDistribution(t *testing.T) {
	g, err := grammar.CompileSchema(context.Background(), []byte(`{"enum":["ab","ba","aab","b"]}`))
	require.NoError(t, err)
	m, err := grammar.NewMatcher(g, grammar.NewVocab(distVocab), []int32{distEOS})
	require.NoError(t, err)
	model := portfake.MustNew(portfake.Config{Vocab: len(distVocab), Seed: 5, Sharpness: 2, EOS: []ports.Token{distEOS}, Tape: true})
	prompt := []ports.Token{1, 2, 3}
	exact := exactConstrained(t, model, m, prompt)
	require.Greater(t, len(exact), 4, "several spellings of the enum")
	drafter, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, Propose: portfake.RandomTokens(len(distVocab), 9)})
	require.NoError(t, err)
	for _, verify := range []speculative.Verification{speculative.VerifyResidual, speculative.VerifyMatch} {
		t.Run(verify.String(), func(t *testing.T) {
			const n = 6000
			counts := map[string]int{}
			for i := range n {
				sess, err := model.NewSession(t.Context(), []int{0})
				require.NoError(t, err)
				ds, err := drafter.NewSession(t.Context())
				require.NoError(t, err)
				cs, _ := constrained.Wrap(sess, m, len(prompt), 0, len(distVocab), systemClock{})
				cfg := speculative.Config{BlockSize: 4, MaxTokens: 12, ContextLength: 64, StopTokens: []ports.Token{distEOS},
					Sampling: ports.SamplingParams{Temperature: 1}, Verify: verify}
				dec, err := speculative.New(cfg, systemClock{}, sampling.NewSource(uint64(i)))
				require.NoError(t, err)
				res, err := dec.Generate(t.Context(), cs, ds, prompt, func([]ports.Token) error { return nil })
				require.NoError(t, err)
				require.Equal(t, speculative.FinishStop, res.Finish)
				counts[seqKey(res.Tokens)]++
				require.NoError(t, ds.Close())
				require.NoError(t, sess.Close())
			}
			var chi float64
			for k, p := range exact {
				e := p * n
				d := float64(counts[k]) - e
				chi += d * d / e
			}
			for k := range counts {
				assert.Contains(t, exact, k, "an output the grammar forbids or the model cannot give")
			}
			df := float64(len(exact) - 1)
			// Wilson–Hilferty: (χ²/df)^(1/3) is about normal.
			z := (math.Cbrt(chi/df) - (1 - 2/(9*df))) / math.Sqrt(2/(9*df))
			assert.Less(t, z, 3.5, "chi-square %.1f over %d outputs (z %.2f)", chi, len(exact), z)
		})
	}
}
