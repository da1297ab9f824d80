package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
)

// A product whose last rows repeat computes the first of them once and copies it: every row keeps the bits
// of the whole product, in either kernel mode, for every shape of repeat (none, a tail of 2, all rows the
// same, a tail after several distinct rows, a row equal but for a signed zero).
func TestLinearRepeatedRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const out, in = 48, 128
	for _, mode := range []kernel.Mode{kernel.ModeExact, kernel.ModeFast} {
		for _, format := range []string{"q4", "f32"} {
			l := randLinear(r, format, out, in)
			l.Pool = kernel.NewPoolMode(2, mode)
			o := ops{pool: l.Pool}
			for _, c := range []struct {
				name     string
				distinct int // rows before the repeated tail
				rows     int
				tail     int // repeatedTail's answer
			}{
				{"no repeat", 7, 7, 6},
				{"two rows", 1, 2, 1},
				{"a tail of three", 3, 5, 2},
				{"all the same", 1, 16, 0},
				{"anchor and masks", 2, 16, 1},
				{"several then a tail", 6, 17, 5},
			} {
				t.Run(fmt.Sprintf("%v/%s/%s", mode, format, c.name), func(t *testing.T) {
					x := make([]float32, c.rows*in)
					for i := range c.distinct * in {
						x[i] = r.Float32()*2 - 1
					}
					for row := c.distinct; row < c.rows; row++ {
						copy(x[row*in:(row+1)*in], x[(c.distinct-1)*in:c.distinct*in])
					}
					a := act{x, c.rows}
					require.Equal(t, c.tail, repeatedTail(a))
					want := make([]float32, c.rows*out)
					l.Forward(want, x, c.rows)
					got := o.Linear(&weight{lin: l}, a)
					for i := range want {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got.v[i]), "element %d", i)
					}
				})
			}
		}
	}
	// Rows equal as numbers but not as bits are not a repeat.
	x := []float32{1, 0, 1, float32(math.Copysign(0, -1)), 1, 0}
	assert.Equal(t, 2, repeatedTail(act{x, 3}))
}
