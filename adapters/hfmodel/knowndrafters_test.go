package hfmodel

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDraftersFor(t *testing.T) {
	cache := filepath.Join("home", ".cache", "huggingface", "hub")
	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"Qwen/Qwen3-4B", []string{"z-lab/Qwen3-4B-DFlash-b16"}},
		{"Qwen/Qwen3-4B@main", []string{"z-lab/Qwen3-4B-DFlash-b16"}},
		{"Qwen/Qwen3-4B-MLX-4bit", []string{"z-lab/Qwen3-4B-DFlash-b16"}},
		{"mlx-community/Qwen3.5-4B-4bit", []string{"z-lab/Qwen3.5-4B-DFlash"}},
		{"mlx-community/qwen3.5-9b-8bit", []string{"z-lab/Qwen3.5-9B-DFlash"}},
		{"mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit-dwq", []string{"z-lab/Qwen3-Coder-30B-A3B-DFlash"}},
		{"Qwen/Qwen3.8-27B", []string{"z-lab/Qwen3.8-27B-DFlash2"}},
		{"/models/Qwen3-8B", []string{"z-lab/Qwen3-8B-DFlash-b16"}},
		{filepath.Join(cache, "models--Qwen--Qwen3.6-27B", "snapshots", "abc123"), []string{"z-lab/Qwen3.6-27B-DFlash"}},
		// Another model of the family, a fine-tune or a size without a published drafter: none.
		{"Qwen/Qwen3-4B-Instruct-2507", nil},
		{"Qwen/Qwen3-4B-Base", nil},
		{"Qwen/Qwen3-14B", nil},
		{"Qwen/Qwen3-Next-80B-A3B-Instruct", nil},
		{"models/gocoder/target", nil},
		{"", nil},
	} {
		var got []string
		for _, p := range DraftersFor(tc.target) {
			got = append(got, p.Drafter)
		}
		assert.Equal(t, tc.want, got, tc.target)
	}
}

// Every row is a well-formed pair of hub ids of z-lab's, of a known generation, and no target is listed twice
// for one generation.
func TestKnownDraftersWellFormed(t *testing.T) {
	seen := map[string]bool{}
	zlab := regexp.MustCompile(`^z-lab/`)
	for _, p := range KnownDrafters {
		_, err := ParseHubID(p.Target)
		require.NoError(t, err, p.Target)
		_, err = ParseHubID(p.Drafter)
		require.NoError(t, err, p.Drafter)
		assert.Regexp(t, zlab, p.Drafter)
		assert.Contains(t, []string{"DFlash", "DFlash2"}, p.Generation)
		key := p.Target + " " + p.Generation
		assert.False(t, seen[key], "%s listed twice", key)
		seen[key] = true
	}
}

func TestParseHubID(t *testing.T) {
	id, err := ParseHubID("Qwen/Qwen3-4B@refs/pr/1")
	require.NoError(t, err)
	assert.Equal(t, HubID{Org: "Qwen", Name: "Qwen3-4B", Revision: "refs/pr/1"}, id)
	assert.Equal(t, "Qwen/Qwen3-4B", id.Repo())
	assert.Equal(t, "refs/pr/1", id.Rev())
	assert.Equal(t, "Qwen/Qwen3-4B@refs/pr/1", id.String())
	assert.Equal(t, filepath.Join("c", "models--Qwen--Qwen3-4B"), id.RepoDir("c"))
	id, err = ParseHubID("o/n")
	require.NoError(t, err)
	assert.Equal(t, "main", id.Rev())
	assert.Equal(t, "o/n", id.String())
	for _, bad := range []string{"", "n", "o/n/x", "../n", "o/n@a/../b", "o /n"} {
		_, err := ParseHubID(bad)
		assert.Error(t, err, bad)
	}
}

func FuzzParseHubID(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen3-4B", "o/n@main", "o/n@refs/pr/1", "../x", "o/n@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseHubID(s)
		if err != nil {
			return
		}
		// A parsed id prints back as given and its cache directory stays inside the cache.
		assert.Equal(t, s, id.String())
		dir := id.RepoDir("cache")
		assert.Equal(t, "cache", filepath.Dir(dir))
		_ = DraftersFor(s)
	})
}
