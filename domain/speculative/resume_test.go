package speculative

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// TestResumeFromRestoredPrefix: a generation whose sessions start from an exported prefix of the prompt
// (what the prefix cache restores) produces exactly the tokens of one that prefilled the whole prompt,
// greedy and seeded, with and without the drafter, on hybrid and attention-only models; the prefill stops
// call Checkpoint where the session holds exactly that prefix; SyncDrafter leaves the drafter level with the
// target.
func TestResumeFromRestoredPrefix(t *testing.T) {
	models := map[string]portfake.Config{
		"hybrid-tape":    {Tape: true},
		"attention-only": {Layers: []ports.LayerKind{ports.LayerAttention, ports.LayerAttention}},
	}
	for name, mcfg := range models {
		for _, bs := range []int{1, 4} {
			for _, temp := range []float64{0, 0.8} {
				t.Run(fmt.Sprintf("%s/bs%d/T%g", name, bs, temp), func(t *testing.T) {
					m := portfake.MustNew(mcfg)
					var dr *portfake.Drafter
					var taps []int
					if bs > 1 {
						var err error
						dr, err = portfake.NewDrafter(portfake.DrafterConfig{BlockSize: bs, TapLayers: []int{0}, Propose: portfake.MatchThenDiverge(m, 2)})
						require.NoError(t, err)
						taps = dr.TapLayers()
					}
					open := func() (ports.Session, ports.DraftSession) {
						s, err := m.NewSession(t.Context(), taps)
						require.NoError(t, err)
						t.Cleanup(func() { _ = s.Close() })
						if dr == nil {
							return s, nil
						}
						d, err := dr.NewSession(t.Context())
						require.NoError(t, err)
						return s, d
					}
					prompt := testPrompt(23, m.Info().VocabSize)
					cfg := Config{BlockSize: bs, MaxTokens: 30, Sampling: ports.SamplingParams{Temperature: temp}}
					run := func(sess ports.Session, draft ports.DraftSession, cfg Config) Result {
						dec, err := New(cfg, portfake.NewClock(time.Millisecond), portfake.NewRand(7))
						require.NoError(t, err)
						res, err := dec.Generate(t.Context(), sess, draft, prompt, func([]ports.Token) error { return nil })
						require.NoError(t, err)
						return res
					}
					s0, d0 := open()
					want := run(s0, d0, cfg)

					// A first generation exports at its prefill stops and at its end.
					s1, d1 := open()
					states := map[int]ports.PrefixState{}
					c1 := cfg
					c1.PrefillStops = []int{8, 16}
					c1.SyncDrafter = true
					c1.Checkpoint = func(n int) error {
						require.Equal(t, n, s1.Len())
						st, err := s1.(ports.PrefixExporter).ExportPrefix(n)
						require.NoError(t, err)
						states[n] = st
						return nil
					}
					got := run(s1, d1, c1)
					assert.Equal(t, want.Tokens, got.Tokens, "stops in the prefill change nothing")
					require.Len(t, states, 3)
					if d1 != nil {
						assert.Equal(t, s1.Len(), d1.Len(), "SyncDrafter leaves the drafter level with the target")
					}

					for _, at := range []int{8, 16} {
						s2, d2 := open()
						require.NoError(t, s2.(ports.PrefixExporter).ImportPrefix(states[at]))
						if d2 != nil {
							dst, err := d1.(ports.PrefixExporter).ExportPrefix(at)
							require.NoError(t, err)
							require.NoError(t, d2.(ports.PrefixExporter).ImportPrefix(dst))
						}
						res := run(s2, d2, cfg)
						assert.Equal(t, want.Tokens, res.Tokens, "resumed at %d", at)
					}
				})
			}
		}
	}
}

func TestResumeRefusals(t *testing.T) {
	m := portfake.MustNew(portfake.Config{Tape: true})
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, TapLayers: []int{0}, Propose: portfake.Perfect(m)})
	require.NoError(t, err)
	prompt := testPrompt(6, m.Info().VocabSize)
	noop := func([]ports.Token) error { return nil }
	gen := func(cfg Config, fill int, draft bool) error {
		s, err := m.NewSession(context.Background(), dr.TapLayers())
		require.NoError(t, err)
		defer s.Close()
		if fill > 0 {
			_, err := s.Forward(t.Context(), prompt[:fill], ports.ForwardOptions{})
			require.NoError(t, err)
		}
		var d ports.DraftSession
		if draft {
			d, err = dr.NewSession(t.Context())
			require.NoError(t, err)
		}
		dec, err := New(cfg, portfake.NewClock(0), portfake.NewRand(1))
		require.NoError(t, err)
		_, err = dec.Generate(t.Context(), s, d, prompt, noop)
		return err
	}
	base := Config{BlockSize: 4, MaxTokens: 4}
	assert.ErrorContains(t, gen(base, 6, false), "fewer than the prompt's 6")
	assert.ErrorContains(t, gen(base, 3, true), "draft session holds 0 positions, want the target session's 3")
	stops := base
	stops.PrefillStops = []int{2}
	assert.ErrorContains(t, gen(stops, 3, false), "prefill stop 2 outside (3, 6)")
	bad := base
	bad.PrefillStops = []int{3, 2}
	_, err = New(bad, portfake.NewClock(0), portfake.NewRand(1))
	assert.ErrorContains(t, err, "ascending")
	fail := base
	fail.Checkpoint = func(int) error { return portfake.ErrInjected }
	assert.ErrorIs(t, gen(fail, 0, true), portfake.ErrInjected)
}
