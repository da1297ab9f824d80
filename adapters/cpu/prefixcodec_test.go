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

// TestPrefixCodecRefusesTheOtherKVFormat: a state written by a float32-KV target is refused by an 8-bit-KV
// target of the same weights, and the other way round.
func TestPrefixCodecRefusesTheOtherKVFormat(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 9})
	var states [2][]byte
	var targets [2]*Target
	for i, bits := range []int{32, 8} {
		tg, err := Load(t.Context(), dir, LoadOptions{Threads: 1, KVBits: bits})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tg.Close() })
		sess, err := tg.NewSession(t.Context(), nil)
		require.NoError(t, err)
		_, err = sess.Forward(t.Context(), []ports.Token{1, 2, 3, 4}, ports.ForwardOptions{})
		require.NoError(t, err)
		st, err := sess.(ports.PrefixExporter).ExportPrefix(4)
		require.NoError(t, err)
		states[i], err = tg.EncodePrefix(st)
		require.NoError(t, err)
		targets[i] = tg
	}
	_, err := targets[1].DecodePrefix(states[0])
	assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid)
	_, err = targets[0].DecodePrefix(states[1])
	assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid)
	_, err = targets[1].DecodePrefix(states[1])
	assert.NoError(t, err)
}
