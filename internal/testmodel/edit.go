package testmodel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
)

// Synth writes adapters/synth's random target of spec into a fresh t.TempDir() and returns the directory:
// the models `higgs-verify synth` builds, used where a test needs a target paired with a synth drafter.
func Synth(t testing.TB, spec synth.TargetSpec) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, synth.WriteTarget(dir, spec))
	return dir
}

// SynthDrafter writes adapters/synth's random DFlash drafter of spec into a fresh t.TempDir() and returns
// the directory.
func SynthDrafter(t testing.TB, spec synth.DrafterSpec) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, synth.WriteDrafter(dir, spec))
	return dir
}

// EditConfig rewrites dir/config.json through edit.
func EditConfig(t testing.TB, dir string, edit func(cfg map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// Tensors reads every tensor of dir/model.safetensors (copied, so the store can be closed), in stored order.
func Tensors(t testing.TB, dir string) []safetensors.Tensor {
	t.Helper()
	st, err := safetensors.OpenFile(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	defer st.Close()
	var ts []safetensors.Tensor
	for _, n := range st.Names() {
		x, err := st.Tensor(n)
		require.NoError(t, err)
		c := *x
		c.Shape, c.Data = slices.Clone(x.Shape), slices.Clone(x.Data)
		ts = append(ts, c)
	}
	return ts
}

// RewriteWeights replaces dir/model.safetensors by edit(its tensors).
func RewriteWeights(t testing.TB, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	ts := edit(Tensors(t, dir))
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil))
}

// WithTensors writes a checkpoint into a fresh t.TempDir() holding dir's config.json and the tensors ts, and
// returns its directory.
func WithTensors(t testing.TB, dir string, ts []safetensors.Tensor) string {
	t.Helper()
	out := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "config.json"), cfg, 0o644))
	require.NoError(t, safetensors.Write(filepath.Join(out, "model.safetensors"), ts, nil))
	return out
}

// Copy copies the files of checkpoint dir into a fresh t.TempDir(), passing config.json through edit when
// edit is non-nil, and returns the copy's directory.
func Copy(t testing.TB, dir string, edit func(cfg map[string]any)) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(out, e.Name()), b, 0o644))
	}
	if edit != nil {
		EditConfig(t, out, edit)
	}
	return out
}

// Truncate cuts dir/name to half its size, as an interrupted download leaves it.
func Truncate(t testing.TB, dir, name string) {
	t.Helper()
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b[:len(b)/2], 0o644))
}

// Quantize re-stores every 2-D Linear weight of dir (a float checkpoint; norms and matrices whose input
// width is not a whole number of groups stay float) as MLX affine codes with F32 scales and biases, stores
// every other tensor as F32, and adds the quantization block to config.json.
func Quantize(t testing.TB, dir string, spec quant.Spec) {
	t.Helper()
	var out []safetensors.Tensor
	for _, tn := range Tensors(t, dir) {
		n := tn.Name
		v, err := tn.Float32()
		require.NoError(t, err)
		linear := strings.HasSuffix(n, ".weight") && len(tn.Shape) == 2 && !strings.Contains(n, "norm") && tn.Shape[1]%spec.GroupSize == 0
		if !linear {
			x, err := safetensors.FromFloat32(n, safetensors.F32, tn.Shape, v)
			require.NoError(t, err)
			out = append(out, x)
			continue
		}
		rows, in := tn.Shape[0], tn.Shape[1]
		packed, sc, bi, err := quant.Pack(v, rows, in, spec)
		require.NoError(t, err)
		base := strings.TrimSuffix(n, ".weight")
		w, err := safetensors.FromUint32(n, []int{rows, in * spec.Bits / 32}, packed)
		require.NoError(t, err)
		s, err := safetensors.FromFloat32(base+".scales", safetensors.F32, []int{rows, in / spec.GroupSize}, sc)
		require.NoError(t, err)
		b, err := safetensors.FromFloat32(base+".biases", safetensors.F32, []int{rows, in / spec.GroupSize}, bi)
		require.NoError(t, err)
		out = append(out, w, s, b)
	}
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), out, nil))
	EditConfig(t, dir, func(cfg map[string]any) {
		cfg["quantization"] = map[string]any{"group_size": spec.GroupSize, "bits": spec.Bits}
	})
}

// TokenizerVocab is the vocabulary size of the hand-made tokenizer Tokenizer writes (its ids are 0..531).
const TokenizerVocab = 532

// Tokenizer copies the hand-made byte-level BPE tokenizer (tokenizer.json and tokenizer_config.json with a
// chat template, from adapters/tokenizer/testdata/handmade) into dir, so a checkpoint there can be
// prompted with text.
func Tokenizer(t testing.TB, dir string) {
	t.Helper()
	require.NoError(t, CopyTokenizer(dir))
}

// CopyTokenizer is Tokenizer for a TestMain, which has no testing.TB.
func CopyTokenizer(dir string) error {
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "adapters", "tokenizer", "testdata", "handmade")
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Files writes files (name → content) into a fresh t.TempDir() and returns the directory: hand-written
// tokenizer_config.json, chat_template.jinja or config.json fixtures, malformed ones included.
func Files(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	return dir
}
