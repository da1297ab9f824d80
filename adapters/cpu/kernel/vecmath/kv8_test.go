package vecmath

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQuantizeRow8(t *testing.T) {
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name  string
		x     []float32
		q     []int8
		scale float32
	}{
		{"zeros", []float32{0, 0, 0}, []int8{0, 0, 0}, 0},
		{"max maps to 127", []float32{1.27, -0.635, 0}, []int8{127, -64, 0}, 0.01},
		{"negative max", []float32{-2.54, 1, 0.01}, []int8{-127, 50, 0}, 0.02},
		{"half rounds to even", []float32{127, 0.5, 1.5, -2.5}, []int8{127, 0, 2, -2}, 1},
		{"nan poisons the row", []float32{1, nan, 2}, []int8{0, 0, 0}, nan},
		{"inf poisons the row", []float32{1, float32(math.Inf(-1))}, []int8{0, 0}, nan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := []int8{9, 9, 9, 9, 9} // longer than x: the tail stays
			s := QuantizeRow8(q, tc.x)
			if math.IsNaN(float64(tc.scale)) {
				assert.True(t, math.IsNaN(float64(s)), "scale %v", s)
			} else {
				assert.InDelta(t, tc.scale, s, 1e-7)
			}
			assert.Equal(t, tc.q, q[:len(tc.x)])
			assert.Equal(t, int8(9), q[len(q)-1])
		})
	}
}

// TestQuantizeRow8Error checks the round trip's error bound (half a step, s/2, per value) and that quantizing
// a read-back row again gives the same codes and scale (a cached row re-exported stays bit-identical).
func TestQuantizeRow8Error(t *testing.T) {
	x := make([]float32, 128)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.731)) * float32(1+i%7)
	}
	q := make([]int8, len(x))
	s := QuantizeRow8(q, x)
	require.NotZero(t, s)
	y := make([]float32, len(x))
	DequantizeRow8(y, q, s)
	for i := range x {
		assert.LessOrEqual(t, math.Abs(float64(x[i]-y[i])), float64(s)/2*1.0001, "value %d", i)
	}
	q2 := make([]int8, len(x))
	s2 := QuantizeRow8(q2, y)
	assert.Equal(t, q, q2)
	assert.Equal(t, s, s2)
}

func FuzzQuantizeRow8(f *testing.F) {
	f.Add(float32(1), float32(-3), float32(0.25), float32(7))
	f.Add(float32(0), float32(0), float32(0), float32(0))
	f.Add(float32(1e-38), float32(-1e38), float32(3e38), float32(1e-45))
	f.Fuzz(func(t *testing.T, a, b, c, d float32) {
		x := []float32{a, b, c, d}
		q := make([]int8, 4)
		s := QuantizeRow8(q, x)
		y := make([]float32, 4)
		DequantizeRow8(y, q, s)
		if math.IsNaN(float64(s)) {
			return
		}
		for i := range x {
			if q[i] < -127 {
				t.Fatalf("code %d out of range", q[i])
			}
			if e := math.Abs(float64(x[i] - y[i])); e > float64(s)*0.5001+1e-45 {
				t.Fatalf("value %d: |%v − %v| = %v > s/2 (s %v)", i, x[i], y[i], e, s)
			}
		}
	})
}
