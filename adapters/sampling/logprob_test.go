package sampling

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestLogprobs(t *testing.T) {
	inf := float32(math.Inf(-1))
	row := []float32{1, 3, 3, inf, 2, float32(math.NaN()), -1}
	lp, top, err := Logprobs(row, 4, 3)
	require.NoError(t, err)
	var sum float64
	for _, v := range []float64{1, 3, 3, 2, -1} {
		sum += math.Exp(v)
	}
	lse := math.Log(sum)
	assert.InDelta(t, 2-lse, lp, 1e-12)
	require.Len(t, top, 3)
	// Sorted descending, ties by the lowest id.
	assert.Equal(t, []ports.Token{1, 2, 4}, []ports.Token{top[0].Token, top[1].Token, top[2].Token})
	assert.InDelta(t, 3-lse, top[0].Logprob, 1e-12)
	assert.Equal(t, top[0].Logprob, top[1].Logprob)
	assert.Equal(t, lp, top[2].Logprob, "the listed value is the token's own")

	// A masked token: −Inf, never listed; fewer alternatives than asked when few are allowed.
	lp, top, err = Logprobs(row, 3, 10)
	require.NoError(t, err)
	assert.True(t, math.IsInf(lp, -1))
	assert.Len(t, top, 5)

	_, top, err = Logprobs(row, 0, 0)
	require.NoError(t, err)
	assert.Nil(t, top)

	_, _, err = Logprobs([]float32{inf, inf}, 0, 1)
	assert.Error(t, err)
	_, _, err = Logprobs(row, 7, 1)
	assert.Error(t, err)
}

func TestLogprobsDeterministic(t *testing.T) {
	row := make([]float32, 1000)
	for i := range row {
		row[i] = float32(math.Sin(float64(i))) * 7
	}
	a, ta, err := Logprobs(row, 17, 20)
	require.NoError(t, err)
	b, tb, err := Logprobs(append([]float32(nil), row...), 17, 20)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Equal(t, ta, tb)
	for i := 1; i < len(ta); i++ {
		assert.GreaterOrEqual(t, ta[i-1].Logprob, ta[i].Logprob)
	}
}
