package mlx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// The first failing op's MLX message becomes the graph's error; later ops are no-ops returning the null
// array, evaluation is skipped, and release frees what was built.
func TestGraphStickyError(t *testing.T) {
	requireMLX(t)
	rt, err := mlxc.Open()
	require.NoError(t, err)
	err = rt.Do(func() error {
		g := newGraph(rt, "test graph")
		defer g.release()
		a := uploadF32(g, []float32{1, 2, 3}, 3)
		b := uploadF32(g, []float32{1, 2}, 2)
		require.NoError(t, g.err)
		sum := g.add(a, b) // shapes do not broadcast
		assert.Zero(t, sum)
		assert.Zero(t, g.matmul(a, a), "ops after an error do nothing")
		g.eval(sum)
		return g.err
	})
	require.Error(t, err)
	assert.ErrorContains(t, err, "test graph: add")
	var me *mlxc.Error
	assert.ErrorAs(t, err, &me)
	// The runtime is usable afterwards.
	require.NoError(t, rt.Do(func() error {
		g := newGraph(rt, "after")
		defer g.release()
		x := g.add(uploadF32(g, []float32{1}, 1), uploadF32(g, []float32{2}, 1))
		g.eval(x)
		assert.Equal(t, []float32{3}, g.readF32(x))
		return g.err
	}))
}
