package hfmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStopTokens(t *testing.T) {
	tests := []struct {
		name     string
		gen, cfg []int32
		want     []int32
	}{
		{name: "neither", want: nil},
		{name: "generation only", gen: []int32{7, 3}, want: []int32{7, 3}},
		{name: "config only", cfg: []int32{5}, want: []int32{5}},
		{name: "generation first, config adds", gen: []int32{2}, cfg: []int32{9, 2}, want: []int32{2, 9}},
		{name: "duplicates within a list", gen: []int32{4, 4, 1}, cfg: []int32{1, 1}, want: []int32{4, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := StopTokens(&GenerationConfig{EOSTokenIDs: tc.gen}, &TextConfig{EOSTokenIDs: tc.cfg})
			assert.Equal(t, tc.want, got)
		})
	}
}
