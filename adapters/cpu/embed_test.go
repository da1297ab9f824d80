package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// embedFixtures are the families the embeddings endpoint must serve: dense Qwen3, the Qwen3.5 hybrid, and
// the quantized Qwen3-Next hybrid MoE.
var embedFixtures = map[string]testmodel.TargetSpec{
	"qwen3":             {Family: "qwen3", Seed: 81, Layers: 2, Tied: true},
	"qwen3_5 hybrid":    {Family: "qwen3_5", Seed: 82, Layers: 4, OutputGate: true, PartialRotary: 0.25},
	"qwen3_next moe q4": {Family: "qwen3_next", Seed: 83, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
}

// The Embedder conformance suite (bit-exact: the CPU backend is deterministic whatever the thread count).
func TestEmbedConformance(t *testing.T) {
	for name, f := range embedFixtures {
		t.Run(name, func(t *testing.T) {
			f.Context = 24
			porttest.EmbedSuite{Target: loadFixture(t, f, 2), CheckContext: true}.Run(t)
		})
	}
}

// LastHidden is the row the LM head reads: the head applied to it gives, bit for bit, the logits a session's
// prefill returns for its last position.
func TestLastHiddenIsTheHeadsInput(t *testing.T) {
	for name, f := range embedFixtures {
		t.Run(name, func(t *testing.T) {
			f.Context = 64
			tg := loadFixture(t, f, 2)
			tokens := []ports.Token{3, 17, 5, 40, 9, 2, 33}
			h, err := tg.LastHidden(t.Context(), tokens)
			require.NoError(t, err)
			got := make([]float32, testmodel.Vocab)
			require.NoError(t, tg.LMHead(got, h, 1))

			s, err := tg.NewSession(t.Context(), nil)
			require.NoError(t, err)
			defer s.Close()
			res, err := s.Forward(t.Context(), tokens, ports.ForwardOptions{Rows: 1, Logits: true})
			require.NoError(t, err)
			require.Len(t, res.Logits, len(got))
			for i := range got {
				require.Equal(t, math.Float32bits(res.Logits[i]), math.Float32bits(got[i]), "logit %d", i)
			}
		})
	}
}
