package porttest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
	"github.com/higgs-go/higgs/ports/porttest"
)

func readFakeTaps(t ports.Taps) ([][]float32, error) {
	ft, ok := t.(*portfake.Taps)
	if !ok {
		return nil, errors.New("not portfake taps")
	}
	rows, err := ft.Values()
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = r.Values
	}
	return out, nil
}

// fakeLayerMixes are portfake's layer mixes the session and tree suites run on, at a context length.
func fakeLayerMixes(contextLength int) map[string]portfake.Config {
	return map[string]portfake.Config{
		"hybrid-tape":     {Tape: true, ContextLength: contextLength},
		"hybrid-snapshot": {ContextLength: contextLength},
		"attention-only":  {Layers: []ports.LayerKind{ports.LayerAttention}, ContextLength: contextLength},
		"recurrent-only":  {Layers: []ports.LayerKind{ports.LayerRecurrent}, Tape: true, ContextLength: contextLength},
	}
}

func TestPortfakeSessions(t *testing.T) {
	for name, cfg := range fakeLayerMixes(64) {
		t.Run(name, func(t *testing.T) {
			m := portfake.MustNew(cfg)
			porttest.SessionSuite{
				Open:          porttest.Sessions(m),
				Vocab:         m.Info().VocabSize,
				TapLayers:     []int{0},
				ReadTaps:      readFakeTaps,
				ContextLength: cfg.ContextLength,
			}.Run(t)
		})
	}
	t.Run("simple", func(t *testing.T) {
		m := portfake.MustNew(portfake.Config{Tape: true})
		porttest.TestSession(t, func(t *testing.T) ports.Session {
			s, err := m.NewSession(t.Context(), nil)
			require.NoError(t, err)
			return s
		}, m.Info().VocabSize)
	})
}

func TestPortfakeDraftSession(t *testing.T) {
	m := portfake.MustNew(portfake.Config{Tape: true})
	for name, p := range map[string]portfake.Proposer{
		"perfect": portfake.Perfect(m),
		"sampled": portfake.Sampled(m, ports.SamplingParams{Temperature: 1}, 3),
	} {
		t.Run(name, func(t *testing.T) {
			dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 8, TapLayers: []int{1, 2}, Propose: p, ContextLength: 64})
			require.NoError(t, err)
			porttest.DraftSuite{OpenTarget: func(t *testing.T) ports.Session {
				s, err := m.NewSession(t.Context(), dr.TapLayers())
				require.NoError(t, err)
				return s
			}, OpenDraft: func(t *testing.T) ports.DraftSession {
				d, err := dr.NewSession(t.Context())
				require.NoError(t, err)
				return d
			}, BlockSize: dr.BlockSize(), Vocab: m.Info().VocabSize, ContextLength: 64}.Run(t)
		})
	}
}

func TestPortfakeSpeculative(t *testing.T) {
	for name, cfg := range map[string]portfake.Config{
		"hybrid-tape":     {Tape: true},
		"hybrid-snapshot": {},
		"attention-only":  {Layers: []ports.LayerKind{ports.LayerAttention}},
	} {
		t.Run(name, func(t *testing.T) {
			m := portfake.MustNew(cfg)
			for pname, p := range map[string]portfake.Proposer{
				"random":  portfake.RandomTokens(m.Info().VocabSize, 5),
				"partial": portfake.MatchThenDiverge(m, 2),
			} {
				t.Run(pname, func(t *testing.T) {
					dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 8, TapLayers: []int{0}, Propose: p})
					require.NoError(t, err)
					porttest.SpeculativeSuite{Target: m, Drafter: dr}.Run(t)
				})
			}
		})
	}
}

// replayTooFar keeps the verify's whole block whatever ReplayTape is asked: a rollback bug Speculate must
// expose.
type replayTooFar struct{ *portfake.TapeSession }

func (s replayTooFar) ReplayTape(ctx context.Context, tape ports.Tape, _ int) error {
	return s.TapeSession.ReplayTape(ctx, tape, tape.Len())
}

type brokenTarget struct{ *portfake.Model }

func (b brokenTarget) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := b.Model.NewSession(ctx, taps)
	if err != nil {
		return nil, err
	}
	return replayTooFar{s.(*portfake.TapeSession)}, nil
}

func TestSpeculateCatchesBrokenRollback(t *testing.T) {
	m := portfake.MustNew(portfake.Config{Tape: true})
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 8, TapLayers: []int{0}, Propose: portfake.MatchThenDiverge(m, 1)})
	require.NoError(t, err)
	prompt := []ports.Token{3, 1, 4}
	want, err := porttest.Greedy(t.Context(), m, prompt, 20)
	require.NoError(t, err)
	got, _, err := porttest.Speculate(t.Context(), brokenTarget{m}, dr, prompt, 4, porttest.RollbackReplay, 20)
	if err == nil {
		require.NotEqual(t, want, got, "a rollback that keeps rejected positions must change the output or fail")
	}
}

func TestPortfakePrefix(t *testing.T) {
	for name, cfg := range map[string]portfake.Config{
		"hybrid-tape":    {Tape: true},
		"hybrid":         {},
		"attention-only": {Layers: []ports.LayerKind{ports.LayerAttention, ports.LayerAttention}},
	} {
		t.Run(name, func(t *testing.T) {
			m := portfake.MustNew(cfg)
			dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, TapLayers: []int{0}, Propose: portfake.MatchThenDiverge(m, 2)})
			require.NoError(t, err)
			porttest.PrefixSuite{Target: m, Drafter: dr, Vocab: m.Info().VocabSize}.Run(t)
		})
	}
}

func TestPortfakeEmbed(t *testing.T) {
	for name, cfg := range map[string]portfake.Config{
		"hybrid":         {ContextLength: 32},
		"attention-only": {Layers: []ports.LayerKind{ports.LayerAttention}, ContextLength: 32},
		"recurrent-only": {Layers: []ports.LayerKind{ports.LayerRecurrent}, ContextLength: 32},
	} {
		t.Run(name, func(t *testing.T) {
			porttest.EmbedSuite{Target: portfake.MustNew(cfg), CheckContext: true}.Run(t)
		})
	}
}

func TestPortfakeTree(t *testing.T) {
	for name, cfg := range fakeLayerMixes(40) {
		t.Run(name, func(t *testing.T) {
			m := portfake.MustNew(cfg)
			porttest.TreeSuite{
				Open:          porttest.Sessions(m),
				Vocab:         m.Info().VocabSize,
				TapLayers:     []int{0},
				ReadTaps:      readFakeTaps,
				ContextLength: cfg.ContextLength,
			}.Run(t)
		})
	}
}
