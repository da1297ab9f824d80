package speculative

import (
	"testing"
	"time"
)

// BenchmarkPolicyChoose is one round's decision of a policy that has run every block size up to 16 (chains)
// and three tree budgets, while plain decoding is its choice: the work the decoder adds to every plain step.
func BenchmarkPolicyChoose(b *testing.B) {
	for _, trees := range []bool{false, true} {
		name := "chains"
		if trees {
			name = "chains+trees"
		}
		b.Run(name, func(b *testing.B) {
			p := newDepthPolicy(16, PolicyConfig{})
			if trees {
				p.enableTrees([]int{4, 8, 16})
			}
			plain := time.Millisecond
			for range 3 {
				p.observe(1, 0, 0, 0, plain, 0)
			}
			for bs := 2; bs <= 16; bs++ {
				p.observe(bs, bs/3, 300*time.Microsecond, 0, time.Duration(bs)*400*time.Microsecond, 20*time.Microsecond)
			}
			for _, t := range []int{4, 8, 16} {
				p.observeTree(t, 16, 2, 400*time.Microsecond, 0, time.Duration(t)*400*time.Microsecond)
			}
			for b.Loop() {
				d := p.choose(16)
				if d.BlockSize < 1 {
					b.Fatal(d)
				}
			}
		})
	}
}
