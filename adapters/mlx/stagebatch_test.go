package mlx

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMicroBatches(t *testing.T) {
	tests := []struct {
		name        string
		sizes       []int
		m, rowsEach int
		want        []int32
	}{
		{"one sequence", []int{40}, 3, 1, []int32{1}},
		{"few rows pass whole", []int{1, 1, 1}, 3, 32, []int32{3}},
		{"one per rank", []int{1, 1, 1}, 3, 1, []int32{1, 1, 1}},
		{"fewer ranks than sequences", []int{1, 1, 1, 1, 1}, 2, 1, []int32{3, 2}},
		{"balanced by rows", []int{30, 2, 2, 30}, 2, 16, []int32{2, 2}},
		{"balanced by rows, uneven", []int{30, 2, 2, 2, 30}, 2, 16, []int32{3, 2}},
		{"rows decide the count", []int{20, 20, 20, 20}, 4, 32, []int32{2, 1, 1}},
		{"a heavy last sequence keeps one each", []int{1, 1, 100}, 3, 1, []int32{1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := microBatches(tc.sizes, tc.m, tc.rowsEach)
			assert.Equal(t, tc.want, got)
			var n int32
			for _, c := range got {
				assert.Positive(t, c)
				n += c
			}
			assert.Equal(t, int32(len(tc.sizes)), n, "every sequence in one micro-batch")
		})
	}
}
