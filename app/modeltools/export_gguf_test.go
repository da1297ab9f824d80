package modeltools

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/gguf"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/app/verify"
)

// TestSynthDenseSymmetricExports is the path tools/bench/llamacpp.sh takes: a dense symmetric synth with a
// copied tokenizer loads in higgs and exports exactly; an asymmetric one is refused, leaving no file.
func TestSynthDenseSymmetricExports(t *testing.T) {
	dir := t.TempDir()
	res, err := Synth(t.Context(), SynthOptions{Out: dir, Wide: 1, Layers: 2, Vocab: 4096, Seed: 1,
		Quant: &quant.Spec{Bits: 8, GroupSize: 32}, Dense: true, Symmetric: true, Tokenizer: "../../models/demo/target"})
	require.NoError(t, err)
	assert.Equal(t, "qwen3", res.Family)
	assert.True(t, res.Symmetric)
	assert.FileExists(t, filepath.Join(res.Target, "tokenizer.json"))

	out := filepath.Join(dir, "m.gguf")
	ex, err := ExportGGUF(t.Context(), ExportGGUFOptions{Model: res.Target, Out: out, Type: "q8_0"})
	require.NoError(t, err)
	assert.True(t, ex.Exact)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, int64(len(b)), ex.Bytes)
	f, err := gguf.Parse(b)
	require.NoError(t, err)
	toks, ok := f.Get("tokenizer.ggml.tokens")
	require.True(t, ok)
	assert.Len(t, toks, 4096)

	// 8-bit codes have no exact Q4_0 form: refused as bad input, nothing written.
	bad := filepath.Join(dir, "q4.gguf")
	_, err = ExportGGUF(t.Context(), ExportGGUFOptions{Model: res.Target, Out: bad, Type: "q4_0"})
	require.ErrorIs(t, err, verify.ErrBadInput)
	assert.ErrorIs(t, err, gguf.ErrInexact)
	assert.NoFileExists(t, bad)
	left, err := filepath.Glob(filepath.Join(dir, ".export-*"))
	require.NoError(t, err)
	assert.Empty(t, left)

	_, err = ExportGGUF(t.Context(), ExportGGUFOptions{Model: res.Target, Out: bad, Type: "q5_k"})
	assert.ErrorIs(t, err, verify.ErrBadInput)
}

func TestSynthSymmetricOptions(t *testing.T) {
	_, err := Synth(t.Context(), SynthOptions{Out: t.TempDir(), Wide: 1, Layers: 2, Vocab: 64, Dense: true,
		Symmetric: true, Quant: &quant.Spec{Bits: 6, GroupSize: 32}})
	assert.ErrorIs(t, err, verify.ErrBadInput)
	_, err = Synth(t.Context(), SynthOptions{Out: t.TempDir(), Wide: 1, Layers: 2, Vocab: 64, Dense: true,
		Tokenizer: "../../models/demo/target"})
	assert.ErrorContains(t, err, "raise --vocab")
}
