package vecmath

import (
	"math"
	"sync"
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

// The cached tables give compute's bits at every position, across growths, from concurrent readers, and
// past the cache's bound (where Table computes).
func TestRopeTablesCached(t *testing.T) {
	for _, rp := range []*Rope{NewRope(64, 10000), NewRopeFreqs(NewRope(32, 1e6).invFreq, 1.3)} {
		h := rp.Dims / 2
		want := func(pos int) ([]float32, []float32) {
			c, s := make([]float32, h), make([]float32, h)
			rp.compute(c, s, pos)
			return c, s
		}
		limit := ropeTableBytes / (4 * rp.Dims)
		positions := []int{0, 1, 255, 256, 257, 1000, 513, limit - 1}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, pos := range positions {
					c, s, ok := rp.Angles(pos)
					if assert.True(t, ok, "position %d", pos) {
						wc, ws := want(pos)
						assert.Equal(t, wc, c, "cos at %d", pos)
						assert.Equal(t, ws, s, "sin at %d", pos)
					}
				}
			}()
		}
		wg.Wait()
		c0, s0, _ := rp.Angles(3)
		assert.Equal(t, h, cap(c0), "cos is capped at its half")
		assert.Equal(t, h, cap(s0), "sin is capped at its half")
		for _, pos := range []int{limit, limit + 7, -1} {
			_, _, ok := rp.Angles(pos)
			assert.False(t, ok, "position %d is past the cache", pos)
		}
		c, s := make([]float32, h), make([]float32, h)
		rp.Table(c, s, limit+7)
		wc, ws := want(limit + 7)
		assert.Equal(t, wc, c)
		assert.Equal(t, ws, s)
	}
}

// A Rope built without its constructor has no cache: Angles says so and Table computes.
func TestRopeWithoutTables(t *testing.T) {
	rp := &Rope{Dims: 4, invFreq: []float64{1, 0.5}}
	_, _, ok := rp.Angles(3)
	assert.False(t, ok)
	c, s := make([]float32, 2), make([]float32, 2)
	rp.Table(c, s, 3)
	assert.Equal(t, []float32{float32(math.Cos(3)), float32(math.Cos(1.5))}, c)
	assert.Equal(t, []float32{float32(math.Sin(3)), float32(math.Sin(1.5))}, s)
}
