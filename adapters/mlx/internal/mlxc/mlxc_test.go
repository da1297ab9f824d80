package mlxc

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openOrSkip returns the runtime, or skips when libmlxc is absent (CI has none).
func openOrSkip(t *testing.T) *Runtime {
	t.Helper()
	r, err := Open()
	if err != nil {
		require.ErrorIs(t, err, errors.ErrUnsupported, "an unusable library must wrap errors.ErrUnsupported")
		t.Skipf("libmlxc not found: set %s to libmlxc.so (mlx-c %s, MLX %s) to run MLX tests: %v", EnvLib, HeaderVersion, MLXVersion, err)
	}
	return r
}

func newF32(t *testing.T, r *Runtime, v []float32, shape ...int32) Array {
	t.Helper()
	a := ArrayNewData(Pointer(v), &shape[0], int32(len(shape)), Float32)
	require.NoError(t, r.Pending())
	return a
}

func read(t *testing.T, r *Runtime, a Array) ([]float32, []int32) {
	t.Helper()
	require.NoError(t, r.Check(ArrayEval(a)))
	n := int(ArraySize(a))
	return Float32s(ArrayDataFloat32(a), n), Int32s(ArrayShape(a), int(ArrayNdim(a)))
}

func TestOps(t *testing.T) {
	r := openOrSkip(t)
	s := r.Stream()
	tests := []struct {
		name      string
		op        func(a, b Array) (Array, int32)
		want      []float32
		wantShape []int32
	}{
		{"add", func(a, b Array) (Array, int32) { var x Array; return x, Add(&x, a, b, s) }, []float32{11, 22, 33, 44, 55, 66}, []int32{2, 3}},
		{"matmul", func(a, b Array) (Array, int32) {
			var bt, x Array
			if rc := TransposeAxes(&bt, b, &[]int32{1, 0}[0], 2, s); rc != 0 {
				return 0, rc
			}
			defer ArrayFree(bt)
			return x, Matmul(&x, a, bt, s)
		}, []float32{140, 320, 320, 770}, []int32{2, 2}},
		{"reshape", func(a, _ Array) (Array, int32) {
			var x Array
			sh := []int32{3, 2}
			p, n := Ints(sh)
			return x, Reshape(&x, a, p, n, s)
		}, []float32{1, 2, 3, 4, 5, 6}, []int32{3, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Do(func() error {
				a := newF32(t, r, []float32{1, 2, 3, 4, 5, 6}, 2, 3)
				defer ArrayFree(a)
				b := newF32(t, r, []float32{10, 20, 30, 40, 50, 60}, 2, 3)
				defer ArrayFree(b)
				x, rc := tc.op(a, b)
				require.NoError(t, r.Check(rc))
				defer ArrayFree(x)
				got, shape := read(t, r, x)
				assert.Equal(t, tc.want, got)
				assert.Equal(t, tc.wantShape, shape)
				return nil
			})
			require.NoError(t, err)
		})
	}
}

// A shape mismatch must come back as a Go error carrying MLX's message, and MLX must keep working.
func TestErrorPath(t *testing.T) {
	r := openOrSkip(t)
	s := r.Stream()
	err := r.Do(func() error {
		a := newF32(t, r, []float32{1, 2, 3}, 3)
		defer ArrayFree(a)
		b := newF32(t, r, []float32{1, 2}, 2)
		defer ArrayFree(b)
		var x Array
		err := r.Check(Add(&x, a, b, s))
		ArrayFree(x)
		return err
	})
	var me *Error
	require.ErrorAs(t, err, &me)
	assert.Contains(t, me.Msg, "broadcast")
	// Still usable afterwards.
	require.NoError(t, r.Do(func() error {
		a := newF32(t, r, []float32{2}, 1)
		defer ArrayFree(a)
		got, _ := read(t, r, a)
		assert.Equal(t, []float32{2}, got)
		return nil
	}))
}

func TestOptionalPacking(t *testing.T) {
	assert.Equal(t, OptionalInt(1<<32|64), SomeInt(64))
	assert.Equal(t, OptionalInt(1<<32|0xFFFFFFFF), SomeInt(-1))
	assert.Equal(t, OptionalFloat(1<<32|0x3F800000), SomeFloat(1))
	assert.Equal(t, OptionalDtype(1<<32|uint64(Float32)), SomeDtype(Float32))
}

func TestMissingLibrary(t *testing.T) {
	t.Setenv(EnvLib, "/nonexistent/libmlxc.so")
	_, err := open()
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorContains(t, err, "libmlxc not found: set "+EnvLib)
}
