package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// FuzzDecodePrefix: whatever the bytes, DecodePrefix of a hybrid target and of a drafter either refuses them
// (wrapping ports.ErrPrefixRecordInvalid) or returns a state that encodes back to exactly those bytes; it never
// panics.
func FuzzDecodePrefix(f *testing.F) {
	tdir, ddir := testmodel.Synth(f, synth.TargetSpec{Family: "qwen3_next", Seed: 5}), testmodel.SynthDrafter(f, synth.DrafterSpec{Seed: 6, Taps: []int{0, 2}, Mask: 63})
	tg, err := Load(f.Context(), tdir, LoadOptions{Threads: 1})
	require.NoError(f, err)
	f.Cleanup(func() { _ = tg.Close() })
	d, err := LoadDrafter(f.Context(), ddir, tg, DrafterOptions{})
	require.NoError(f, err)
	f.Cleanup(func() { _ = d.Close() })

	sess, err := tg.NewSession(f.Context(), d.TapLayers())
	require.NoError(f, err)
	fr, err := sess.Forward(f.Context(), []ports.Token{1, 2, 3}, ports.ForwardOptions{Taps: true})
	require.NoError(f, err)
	ds, err := d.NewSession(f.Context())
	require.NoError(f, err)
	_, err = ds.Draft(f.Context(), fr.Greedy[2], fr.Taps, 1)
	require.NoError(f, err)
	tst, err := sess.(ports.PrefixExporter).ExportPrefix(3)
	require.NoError(f, err)
	dst, err := ds.(ports.PrefixExporter).ExportPrefix(3)
	require.NoError(f, err)
	for _, c := range []struct {
		codec ports.PrefixCodec
		st    ports.PrefixState
	}{{tg, tst}, {d, dst}} {
		b, err := c.codec.EncodePrefix(c.st)
		require.NoError(f, err)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte("HGPS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []ports.PrefixCodec{tg, d} {
			st, err := c.DecodePrefix(b)
			if err != nil {
				assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid)
				continue
			}
			again, err := c.EncodePrefix(st)
			require.NoError(t, err)
			assert.Equal(t, b, again)
		}
	})
}
