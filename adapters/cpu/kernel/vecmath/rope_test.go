package vecmath

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRopeFreqsScaled(t *testing.T) {
	inv := []float64{1, 0.25}
	const pos, scale = 3, 1.25
	rp := NewRopeFreqs(inv, scale)
	assert.Equal(t, 4, rp.Dims)
	cos, sin := make([]float32, 2), make([]float32, 2)
	rp.Table(cos, sin, pos)
	for i, f := range inv {
		assert.Equal(t, float32(math.Cos(pos*f)*scale), cos[i])
		assert.Equal(t, float32(math.Sin(pos*f)*scale), sin[i])
	}
	// scale 1 gives plain RoPE's bits, so unscaled models keep their goldens.
	plain, one := NewRope(8, 10000), NewRopeFreqs(NewRope(8, 10000).invFreq, 1)
	c0, s0, c1, s1 := make([]float32, 4), make([]float32, 4), make([]float32, 4), make([]float32, 4)
	plain.Table(c0, s0, 11)
	one.Table(c1, s1, 11)
	assert.Equal(t, c0, c1)
	assert.Equal(t, s0, s1)
}
