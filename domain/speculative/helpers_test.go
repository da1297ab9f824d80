package speculative

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// rig is one generation's fakes.
type rig struct {
	model *portfake.Model
	sess  ports.Session
	fake  *portfake.Session
	draft *portfake.DraftSession // nil for plain decoding
}

func newRig(t *testing.T, mcfg portfake.Config, propose portfake.Proposer, dcfg portfake.DrafterConfig) rig {
	t.Helper()
	m, err := portfake.New(mcfg)
	require.NoError(t, err)
	r := rig{model: m}
	var taps []int
	if propose != nil {
		dcfg.Propose = propose
		dr, err := portfake.NewDrafter(dcfg)
		require.NoError(t, err)
		ds, err := dr.NewSession(t.Context())
		require.NoError(t, err)
		r.draft = ds.(*portfake.DraftSession)
		taps = dr.TapLayers()
	}
	s, err := m.NewSession(t.Context(), taps)
	require.NoError(t, err)
	r.sess, r.fake = s, portfake.SessionOf(s)
	t.Cleanup(func() { _ = s.Close() })
	return r
}

func (r rig) draftSession() ports.DraftSession {
	if r.draft == nil {
		return nil
	}
	return r.draft
}

// generate runs a decoder over the rig, checking after every emit that the session holds exactly the state
// reached by feeding only the committed tokens (the rollback property).
func (r rig) generate(t *testing.T, ctx context.Context, cfg Config, rnd ports.Rand, prompt []ports.Token) (Result, error) {
	t.Helper()
	dec, err := New(cfg, portfake.NewClock(time.Millisecond), rnd)
	require.NoError(t, err)
	seq := append([]ports.Token(nil), prompt...)
	return dec.Generate(ctx, r.sess, r.draftSession(), prompt, func(chunk []ports.Token) error {
		seq = append(seq, chunk...)
		r.requireCommitted(t, seq)
		return nil
	})
}

// requireCommitted checks the session against a fresh one fed seq minus its newest token (the anchor).
func (r rig) requireCommitted(t *testing.T, seq []ports.Token) {
	t.Helper()
	ref, err := r.model.NewSession(context.Background(), nil)
	require.NoError(t, err)
	defer ref.Close()
	_, err = ref.Forward(context.Background(), seq[:len(seq)-1], ports.ForwardOptions{Rows: 1})
	require.NoError(t, err)
	require.Equal(t, portfake.SessionOf(ref).State(), r.fake.State(), "session state after committing %d tokens", len(seq))
	if r.draft != nil {
		require.LessOrEqual(t, r.draft.Len(), len(seq)-1)
		require.Equal(t, seq[:r.draft.Len()], r.draft.Context(), "drafter context must be the committed prefix")
	}
}

func testPrompt(n int, vocab int) []ports.Token {
	p := make([]ports.Token, n)
	for i := range p {
		p[i] = ports.Token((i*7 + 3) % vocab)
	}
	return p
}

// observeArms feeds p the round d decided under fixed costs: a plain step 1 ms; a chain of bs slots drafts in
// 0.5 ms, verifies in bs/2 ms and accepts nothing; a tree drafts in 0.5 ms, verifies in 2 ms and accepts
// treeAccepted drafts.
func observeArms(p *depthPolicy, d Decision, treeAccepted int) {
	ms := float64(time.Millisecond)
	switch {
	case d.Tree > 0:
		p.observeTree(d.Tree, d.BlockSize, treeAccepted, time.Duration(0.5*ms), 0, time.Duration(2*ms))
	case d.BlockSize > 1:
		p.observe(d.BlockSize, 0, time.Duration(0.5*ms), 0, time.Duration(ms)*time.Duration(d.BlockSize)/2, 0)
	default:
		p.observe(1, 0, 0, 0, time.Millisecond, 0)
	}
}
