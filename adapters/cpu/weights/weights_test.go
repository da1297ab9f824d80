package weights

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

func TestLoadLinearFormats(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const out, in = 6, 64
	w := make([]float32, out*in)
	for i := range w {
		w[i] = r.Float32() - 0.5
	}
	spec := quant.Spec{Bits: 4, GroupSize: 32}
	packed, scales, biases, err := quant.Pack(w, out, in, spec)
	require.NoError(t, err)
	var ts []safetensors.Tensor
	add := func(tn safetensors.Tensor, err error) {
		require.NoError(t, err)
		ts = append(ts, tn)
	}
	add(safetensors.FromFloat32("f.weight", safetensors.F32, []int{out, in}, w))
	add(safetensors.FromFloat32("b.weight", safetensors.BF16, []int{out, in}, w))
	add(safetensors.FromFloat32("h.weight", safetensors.F16, []int{out, in}, w))
	add(safetensors.FromUint32("q.weight", []int{out, in * 4 / 32}, packed))
	add(safetensors.FromFloat32("q.scales", safetensors.BF16, []int{out, in / 32}, scales))
	add(safetensors.FromFloat32("q.biases", safetensors.BF16, []int{out, in / 32}, biases))
	path := filepath.Join(t.TempDir(), "model.safetensors")
	require.NoError(t, safetensors.Write(path, ts, nil))
	st, err := safetensors.OpenFile(path)
	require.NoError(t, err)
	defer st.Close()

	row := make([]float32, in)
	for _, name := range []string{"f", "b", "h"} {
		l, err := LoadLinear(st, name, nil, out, in)
		require.NoError(t, err, name)
		l.Row(row, 3)
		for j := range in {
			assert.InDelta(t, w[3*in+j], row[j], 4e-3, "%s col %d", name, j)
		}
	}
	// F16 stays half precision and computes the bits of an F32 Linear over the widened tensor (how it loaded
	// before FormatF16).
	h, err := LoadLinear(st, "h", nil, out, in)
	require.NoError(t, err)
	assert.Equal(t, kernel.FormatF16, h.Format())
	assert.Equal(t, 2*out*in, h.Bytes())
	ht, err := st.Tensor("h.weight")
	require.NoError(t, err)
	hw, err := ht.Float32()
	require.NoError(t, err)
	wide, err := kernel.NewF32(out, in, hw)
	require.NoError(t, err)
	x := make([]float32, 3*in)
	for i := range x {
		x[i] = float32(i%7) - 3.25
	}
	for _, rows := range []int{1, 3} {
		got, want := make([]float32, rows*out), make([]float32, rows*out)
		h.Forward(got, x, rows)
		wide.Forward(want, x, rows)
		for i := range want {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "rows %d element %d", rows, i)
		}
	}
	for _, sp := range []*quant.Spec{nil, &spec} { // inferred and explicit spec
		l, err := LoadLinear(st, "q", sp, out, in)
		require.NoError(t, err)
		sc, err := st.Tensor("q.scales")
		require.NoError(t, err)
		scf, _ := sc.Float32()
		bt, _ := st.Tensor("q.biases")
		bif, _ := bt.Float32()
		want := make([]float32, in)
		require.NoError(t, quant.DequantizeRow(want, packed[3*8:4*8], scf[3*2:4*2], bif[3*2:4*2], spec))
		l.Row(row, 3)
		assert.Equal(t, want, row)
	}
	_, err = LoadLinear(st, "f", nil, out, in+1)
	assert.ErrorContains(t, err, "shape")
	_, err = LoadLinear(st, "missing", nil, out, in)
	assert.ErrorIs(t, err, safetensors.ErrMissingTensor)
	_, err = LoadLinear(st, "q", &quant.Spec{Bits: 8, GroupSize: 32}, out, in)
	assert.Error(t, err)
}
