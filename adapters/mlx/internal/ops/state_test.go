package ops

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/higgs-go/higgs/adapters/model"
)

func TestSlidingMask(t *testing.T) {
	// pos 6, window 3, lo 4: context keys 4,5; block slots 0..2; causal.
	m := visibility(6, 4, 3, 3, model.Attend[*Weight]{Pos: 6, Window: 3, Causal: true})
	want := []bool{
		true, true, true, false, false, // slot 0 (pos 6): keys 4,5 (Δ 2,1), block 0
		false, true, true, true, false, // slot 1 (pos 7): key 5 (Δ2), block 0,1
		false, false, true, true, true, // slot 2 (pos 8): block 0..2
	}
	assert.Equal(t, want, m)
}
