package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPolicyMemoryPerRegime checks that adaptive requests share one policy memory per block size and sampling
// regime (what speculative.PolicyConfig.Memory requires), and never across them.
func TestPolicyMemoryPerRegime(t *testing.T) {
	l := &loaded{}
	a := l.policyMemory(16, true)
	assert.Same(t, a, l.policyMemory(16, true), "same block size and regime must share a memory")
	assert.NotSame(t, a, l.policyMemory(16, false), "greedy and sampled decoding must not share a memory")
	assert.NotSame(t, a, l.policyMemory(8, true), "different block sizes must not share a memory")
}
