package speculative

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// samplingSession is a draft session with the ports.SamplingDrafter ability that records how it was called;
// its sampled proposals are the wrapped session's (which sample themselves, portfake.Sampled).
type samplingSession struct {
	ports.DraftSession
	sampled, plain, noRand int
	temps                  []float64
}

func (s *samplingSession) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	if bs > 1 {
		s.plain++
	}
	return s.DraftSession.Draft(ctx, anchor, newCtx, bs)
}

func (s *samplingSession) DraftSampled(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand) (ports.Proposal, error) {
	s.sampled++
	s.temps = append(s.temps, temperature)
	if rnd == nil {
		s.noRand++
	}
	return s.DraftSession.Draft(ctx, anchor, newCtx, bs)
}

// The decoder asks a SamplingDrafter for sampled drafts at temperature > 0 (with the sampling temperature)
// and for plain ones at temperature 0 and for context-only calls.
func TestDecoderUsesSamplingDrafter(t *testing.T) {
	model := portfake.MustNew(portfake.Config{Vocab: 8, Tape: true, Seed: 3})
	for _, temp := range []float64{0, 0.7} {
		dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4,
			Propose: portfake.Sampled(model, ports.SamplingParams{Temperature: 1.5, TopK: 3}, 5)})
		require.NoError(t, err)
		inner, err := dr.NewSession(t.Context())
		require.NoError(t, err)
		ds := &samplingSession{DraftSession: inner}
		sess, err := model.NewSession(t.Context(), dr.TapLayers())
		require.NoError(t, err)
		dec, err := New(Config{BlockSize: 4, MaxTokens: 12, Sampling: ports.SamplingParams{Temperature: temp}},
			portfake.NewClock(time.Microsecond), portfake.NewRand(1))
		require.NoError(t, err)
		_, err = dec.Generate(t.Context(), sess, ds, []ports.Token{1, 2}, func([]ports.Token) error { return nil })
		require.NoError(t, err)
		if temp == 0 {
			assert.Zero(t, ds.sampled, "greedy decoding drafts plainly")
			assert.Positive(t, ds.plain)
		} else {
			assert.Positive(t, ds.sampled)
			assert.Zero(t, ds.plain, "every drafting call at T > 0 is sampled")
			assert.Zero(t, ds.noRand, "with the decoder's random source")
			for _, x := range ds.temps {
				assert.Equal(t, temp, x)
			}
		}
		require.NoError(t, sess.Close())
	}
}

// Under sample-and-match (a seeded request) the decoder drafts plainly even from a SamplingDrafter: only
// equality with the target's own draw counts, so a sampled draft would only be accepted less often.
func TestMatchDraftsPlainly(t *testing.T) {
	model := portfake.MustNew(portfake.Config{Vocab: 8, Tape: true, Seed: 3})
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4,
		Propose: portfake.Sampled(model, ports.SamplingParams{Temperature: 1.5, TopK: 3}, 5)})
	require.NoError(t, err)
	inner, err := dr.NewSession(t.Context())
	require.NoError(t, err)
	ds := &samplingSession{DraftSession: inner}
	sess, err := model.NewSession(t.Context(), dr.TapLayers())
	require.NoError(t, err)
	defer sess.Close()
	dec, err := New(Config{BlockSize: 4, MaxTokens: 12, Sampling: ports.SamplingParams{Temperature: 0.7}, Verify: VerifyMatch},
		portfake.NewClock(time.Microsecond), portfake.NewRand(1))
	require.NoError(t, err)
	_, err = dec.Generate(t.Context(), sess, ds, []ports.Token{1, 2}, func([]ports.Token) error { return nil })
	require.NoError(t, err)
	assert.Zero(t, ds.sampled, "sample-and-match never asks for sampled drafts")
	assert.Positive(t, ds.plain)
}
