package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/higgs-go/higgs/ports"
)

func TestTopK(t *testing.T) {
	nan := float32(math.NaN())
	x := act{[]float32{
		1, 3, 3, 2, 0, // ties go to the lower id
		nan, -1, nan, -2, -1,
		nan, nan, nan, 5, nan, // fewer numbers than k: padded with unused ids, valued NaN
	}, 3}
	ids, vals := ops{}.TopK(x, 3)
	assert.Equal(t, []ports.Token{1, 2, 3, 1, 4, 3, 3, 0, 1}, ids)
	assert.Equal(t, []float32{3, 3, 2, -1, -1, -2, 5}, vals[:7])
	assert.True(t, math.IsNaN(float64(vals[7])) && math.IsNaN(float64(vals[8])))
	one, _ := ops{}.TopK(x, 1)
	assert.Equal(t, []ports.Token{1, 1, 3}, one)
}

func TestGroupConv(t *testing.T) {
	// 3 rows, 4 channels in 2 groups of 2, 2 taps.
	x := act{[]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3}
	dyn := act{[]float32{
		0.5, -1, 0, 0, // row 0: tap 0 groups (0.5, −1), tap 1 groups (0, 0)
		0, 0, 1, 2,
		1, 1, -1, 0,
	}, 3}
	base := &weight{vec: []float32{1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5}}
	got := ops{}.GroupConv(x, dyn, base, 2)
	want := []float32{
		1.5 * 1, 1.5 * 2, 0 * 3, 0 * 4,
		1*5 + 1.5*1, 1*6 + 1.5*2, 1*7 + 2.5*3, 1*8 + 2.5*4,
		2*9 + -0.5*5, 2*10 + -0.5*6, 2*11 + 0.5*7, 2*12 + 0.5*8,
	}
	assert.Equal(t, want, got.v)
}
