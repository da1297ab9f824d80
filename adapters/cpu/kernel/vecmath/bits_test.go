package vecmath

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSameBits(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name string
		a, b []float32
		want bool
	}{
		{"equal", []float32{1, 2, 3}, []float32{1, 2, 3}, true},
		{"empty", nil, []float32{}, true},
		{"lengths", []float32{1, 2}, []float32{1, 2, 3}, false},
		{"one value", []float32{1, 2, 3}, []float32{1, 2, 4}, false},
		{"signed zeros", []float32{0}, []float32{negZero}, false},
		{"same NaN", []float32{nan, 1}, []float32{nan, 1}, true},
		{"other NaN", []float32{nan}, []float32{math.Float32frombits(0x7fc00001)}, false},
	} {
		assert.Equal(t, c.want, SameBits(c.a, c.b), c.name)
	}
}
