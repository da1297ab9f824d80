package mlx

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
)

// requireMLX skips the test when libmlxc cannot be loaded (CI has none).
func requireMLX(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("libmlxc not found: set HIGGS_MLX_LIB to libmlxc.so / libmlxc.dylib to run the MLX tests (%v)", err)
	}
}

// fixture is a tiny random checkpoint written by adapters/synth (the same writer the CPU drafter tests use),
// optionally re-stored with every Linear MLX affine-quantized.
type fixture struct {
	spec  synth.TargetSpec
	quant *quant.Spec
}

func writeFixture(t testing.TB, f fixture) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, synth.WriteTarget(dir, f.spec))
	if f.quant != nil {
		quantize(t, dir, *f.quant)
	}
	return dir
}

// quantize rewrites every 2-D Linear weight of dir as MLX affine codes + F32 scales/biases and adds the
// quantization key to config.json.
func quantize(t testing.TB, dir string, spec quant.Spec) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	st, err := safetensors.OpenFile(path)
	require.NoError(t, err)
	var out []safetensors.Tensor
	for _, n := range st.Names() {
		tn, err := st.Tensor(n)
		require.NoError(t, err)
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
	require.NoError(t, st.Close())
	require.NoError(t, safetensors.Write(path, out, nil))
	cp := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cp)
	require.NoError(t, err)
	cfg := map[string]any{}
	require.NoError(t, json.Unmarshal(raw, &cfg))
	cfg["quantization"] = map[string]any{"group_size": spec.GroupSize, "bits": spec.Bits}
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cp, raw, 0o644))
}
