package mlx

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// checkTree and checkPath take the caller's trees and paths as they come: whatever the bytes, they refuse
// or accept without panicking, and what they accept is a well-formed tree (each parent before its child,
// depths one more than the parent's) and a root's chain of children.
func FuzzCheckTreeAndPath(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2}, []byte{1, 2}, uint8(5))
	f.Add([]byte{0, 0, 0}, []byte{}, uint8(0))
	f.Add([]byte{3, 0, 200}, []byte{0, 9}, uint8(40))
	f.Fuzz(func(t *testing.T, tree, path []byte, held uint8) {
		parents := make([]int, len(tree))
		tokens := make([]ports.Token, len(tree))
		for i, b := range tree {
			parents[i] = int(b%8) - 2 // −2 … 5: bad parents included
			tokens[i] = ports.Token(b) - 4
		}
		pos := model.Position{N: int(held), Rec: int(held)}
		depth, err := checkTree(pos, tokens, parents, ports.ForwardOptions{}, 250, 64)
		if err != nil {
			return
		}
		require.Len(t, depth, len(parents))
		for i, p := range parents {
			require.True(t, p >= -1 && p < i, "node %d's parent %d", i, p)
			if p >= 0 {
				require.Equal(t, depth[p]+1, depth[i])
			} else {
				require.Zero(t, depth[i])
			}
			require.Less(t, int(held)+depth[i], 64)
		}
		nodes := make([]int, len(path))
		for k, b := range path {
			nodes[k] = int(b%16) - 1
		}
		if checkPath(parents, nodes) != nil {
			return
		}
		prev := -1
		for _, n := range nodes {
			require.Equal(t, prev, parents[n])
			prev = n
		}
	})
}
