package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// The drafter tests build tiny drafters of any shape and settings (tinyDraftArch, written by
// testmodel.Drafter) and bind them to a real tiny CPU target written by adapters/synth: a dense Qwen3 of
// hidden size synth.Hidden whose embedding and LM head the drafter borrows.

// draftTaps is a host tap matrix for feeding a draft session arbitrary context rows.
type draftTaps struct {
	data        []float32
	rows, width int
}

var (
	_ ports.Taps     = (*draftTaps)(nil)
	_ ports.HostTaps = (*draftTaps)(nil)
)

func (t *draftTaps) Rows() int { return t.rows }
func (t *draftTaps) Slice(n int) ports.Taps {
	return &draftTaps{data: t.data[:n*t.width], rows: n, width: t.width}
}
func (t *draftTaps) Detach() ports.Taps {
	return &draftTaps{data: slices.Clone(t.data), rows: t.rows, width: t.width}
}
func (t *draftTaps) Host() ([]float32, int, int, error) { return t.data, t.rows, t.width, nil }

// deviceOnlyTaps are taps that cannot be read on the host.
type deviceOnlyTaps struct{ rows int }

func (t deviceOnlyTaps) Rows() int              { return t.rows }
func (t deviceOnlyTaps) Slice(n int) ports.Taps { return deviceOnlyTaps{n} }
func (t deviceOnlyTaps) Detach() ports.Taps     { return t }

// tinyDraftArch is a tiny drafter shape for the tiny targets (hidden synth.Hidden, vocabulary 64, 4
// layers). In the tests' specs MaskToken −1 means "the config has no mask_token_id".
func tinyDraftArch() hfmodel.DrafterArch {
	return hfmodel.DrafterArch{HiddenSize: synth.Hidden, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
		IntermediateSize: 48, RMSNormEps: 1e-6, RopeTheta: 10000, BlockSize: 8, TapLayers: []int{0, 2}, MaskToken: 60,
		VocabSize: 64, NumTargetLayers: 4}
}

// tinyTargetSpec is the dense tiny target the drafter tests bind to.
func tinyTargetSpec(seed uint64) synth.TargetSpec {
	return synth.TargetSpec{Family: "qwen3", Seed: seed, Vocab: 64}
}

// loadTinyTarget writes the target of spec and loads it with threads workers; it returns the target and its
// directory.
func loadTinyTarget(t testing.TB, spec synth.TargetSpec, threads int) (*Target, string) {
	t.Helper()
	dir := testmodel.Synth(t, spec)
	tg, err := Load(t.Context(), dir, LoadOptions{Threads: threads})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	return tg, dir
}

// loadTinyDrafter loads the drafter in dir bound to target with opts; it is closed with the test.
func loadTinyDrafter(t testing.TB, dir string, target *Target, opts DrafterOptions) *Drafter {
	t.Helper()
	d, err := LoadDrafter(t.Context(), dir, target, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// newTinyDrafter writes a target and a drafter of architecture a (both from seed) and loads them, the target
// with threads workers. It returns the drafter and the drafter's and the target's directories.
func newTinyDrafter(t *testing.T, seed uint64, a hfmodel.DrafterArch, threads int, opts DrafterOptions) (*Drafter, string, string) {
	t.Helper()
	target, tdir := loadTinyTarget(t, tinyTargetSpec(seed), threads)
	ddir := testmodel.Drafter(t, rand.New(rand.NewPCG(seed, 1)), a, testmodel.DrafterStorage{})
	return loadTinyDrafter(t, ddir, target, opts), ddir, tdir
}
