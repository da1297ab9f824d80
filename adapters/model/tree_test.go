package model

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestNewTree(t *testing.T) {
	tr, err := NewTree([]int{-1, 0, 0, 1, -1, 4, 3})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 1, 2, 0, 1, 3}, tr.Depth)
	assert.Equal(t, 3, tr.MaxDepth)
	assert.Equal(t, 7, tr.Len())
	for i, want := range [][]int{{0}, {0, 1}, {0, 2}, {0, 1, 3}, {4}, {4, 5}, {0, 1, 3, 6}} {
		assert.Equal(t, want, tr.Path(i), "path of node %d", i)
	}
	for name, parents := range map[string][]int{
		"empty":              {},
		"first has a parent": {0},
		"parent after child": {-1, 2, 0},
		"own parent":         {-1, 1},
		"below -1":           {-1, -2},
	} {
		_, err := NewTree(parents)
		assert.Error(t, err, name)
	}
}

func TestTreeCheckPath(t *testing.T) {
	tr, err := NewTree([]int{-1, 0, 0, 1, -1, 4})
	require.NoError(t, err)
	for _, ok := range [][]int{nil, {0}, {4}, {0, 1, 3}, {0, 2}, {4, 5}} {
		assert.NoError(t, tr.CheckPath(ok), "%v", ok)
	}
	for _, bad := range [][]int{{1}, {0, 3}, {0, 2, 3}, {4, 1}, {6}, {-1}, {0, 1, 3, 3}, {0, 0}} {
		assert.Error(t, tr.CheckPath(bad), "%v", bad)
	}
}

func TestCheckTree(t *testing.T) {
	bad := ports.SamplingParams{Temperature: -1}
	tests := []struct {
		name    string
		pos     Position
		tokens  []ports.Token
		parents []int
		opts    ports.ForwardOptions
		full    bool // ErrContextFull
		ok      bool
	}{
		{name: "chain fits", pos: Position{N: 7, Rec: 7}, tokens: []ports.Token{1, 2, 3}, parents: []int{-1, 0, 1}, ok: true},
		{name: "wide tree fits by depth", pos: Position{N: 8, Rec: 8}, tokens: []ports.Token{1, 2, 3, 4}, parents: []int{-1, 0, 0, 0}, ok: true},
		{name: "too deep", pos: Position{N: 8, Rec: 8}, tokens: []ports.Token{1, 2, 3}, parents: []int{-1, 0, 1}, full: true},
		{name: "no tokens", tokens: nil, parents: nil},
		{name: "length mismatch", tokens: []ports.Token{1}, parents: []int{-1, 0}},
		{name: "rows", tokens: []ports.Token{1}, parents: []int{-1}, opts: ports.ForwardOptions{Rows: 1}},
		{name: "rollback unfinished", pos: Position{N: 3, Rec: 5, Recurrent: true}, tokens: []ports.Token{1}, parents: []int{-1}},
		{name: "bad parent", tokens: []ports.Token{1, 2}, parents: []int{-1, 1}},
		{name: "token outside vocab", tokens: []ports.Token{1, 16}, parents: []int{-1, 0}},
		{name: "bad sampling", tokens: []ports.Token{1}, parents: []int{-1}, opts: ports.ForwardOptions{Sampling: &bad}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := tc.pos.CheckTree(tc.tokens, tc.parents, tc.opts, 16, 10)
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, tc.parents, tr.Parents)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.full, isContextFull(err), "%v", err)
		})
	}
}

func isContextFull(err error) bool { return errors.Is(err, ports.ErrContextFull) }

// ConvRow over a chain's ancestry gives the chain's window rows (t+m) and conv state rows (n+m); a shorter
// path reads the conv state first.
func TestConvRow(t *testing.T) {
	const kc = 4
	for n := 1; n <= 6; n++ {
		path := make([]int, n)
		for i := range path {
			path[i] = i
		}
		for m := range kc {
			assert.Equal(t, n-1+m, ConvRow(path, kc, kc, m), "window of row %d, tap %d", n-1, m)
		}
		for m := range kc - 1 {
			assert.Equal(t, n+m, ConvRow(path, kc, kc-1, m), "state after %d rows, row %d", n, m)
		}
	}
	// Node 5 with ancestry {0, 3, 5}: window = [state row 2, block rows 0, 3, 5] = X rows 2, 3, 6, 8.
	got := make([]int, kc)
	for m := range kc {
		got[m] = ConvRow([]int{0, 3, 5}, kc, kc, m)
	}
	assert.Equal(t, []int{2, 3, 6, 8}, got)
	assert.Equal(t, []int{0, 1, 2}, []int{ConvRow(nil, kc, kc-1, 0), ConvRow(nil, kc, kc-1, 1), ConvRow(nil, kc, kc-1, 2)})
}

// FuzzTree: any parents either build a tree whose paths are valid KeepPath arguments ending at their node,
// with depths that match, or are refused; any path is accepted exactly when it is a root's chain of children.
func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2}, []byte{1, 2})
	f.Add([]byte{0, 0, 0}, []byte{})
	f.Add([]byte{5, 1}, []byte{0, 9})
	f.Fuzz(func(t *testing.T, pb, qb []byte) {
		parents := make([]int, len(pb))
		for i, b := range pb {
			parents[i] = int(int8(b)) - 1
		}
		tr, err := NewTree(parents)
		if err != nil {
			return
		}
		for i := range parents {
			p := tr.Path(i)
			require.Len(t, p, tr.Depth[i]+1)
			require.Equal(t, i, p[len(p)-1])
			require.NoError(t, tr.CheckPath(p))
			require.LessOrEqual(t, tr.Depth[i], tr.MaxDepth)
		}
		path := make([]int, 0, len(qb))
		for _, b := range qb {
			path = append(path, int(int8(b)))
		}
		valid := true
		for k, n := range path {
			if n < 0 || n >= len(parents) || (k == 0 && parents[n] != -1) || (k > 0 && parents[n] != path[k-1]) {
				valid = false
			}
		}
		require.Equal(t, valid, tr.CheckPath(path) == nil, "path %v of %v", path, parents)
	})
}
