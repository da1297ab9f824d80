package hfmodel

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRepo lays out models--org--name in cache with the given snapshots and an optional refs/main.
func fakeRepo(t *testing.T, cache, org, name, mainRef string, snapshots ...string) string {
	t.Helper()
	repo := filepath.Join(cache, "models--"+org+"--"+name)
	for i, s := range snapshots {
		dir := filepath.Join(repo, "snapshots", s)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		// Distinct modification times: later arguments are newer.
		mt := time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		require.NoError(t, os.Chtimes(dir, mt, mt))
	}
	if mainRef != "" {
		require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(mainRef+"\n"), 0o644))
	}
	return repo
}

// isolate points every cache variable somewhere empty so the real home directory is never consulted.
func isolate(t *testing.T) (hubCache, hfHome, home string) {
	t.Helper()
	root := t.TempDir()
	hubCache, hfHome, home = filepath.Join(root, "hubcache"), filepath.Join(root, "hfhome"), filepath.Join(root, "home")
	t.Setenv("HF_HUB_CACHE", hubCache)
	t.Setenv("HF_HOME", hfHome)
	t.Setenv("HOME", home)
	return
}

func TestResolve(t *testing.T) {
	t.Run("local directory", func(t *testing.T) {
		isolate(t)
		dir := t.TempDir()
		got, err := Resolve(dir)
		require.NoError(t, err)
		assert.Equal(t, dir, got)
	})
	t.Run("local file refused", func(t *testing.T) {
		isolate(t)
		f := filepath.Join(t.TempDir(), "config.json")
		require.NoError(t, os.WriteFile(f, []byte("{}"), 0o644))
		_, err := Resolve(f)
		require.ErrorIs(t, err, ErrModelNotFound)
	})
	t.Run("refs/main in HF_HUB_CACHE", func(t *testing.T) {
		hub, _, _ := isolate(t)
		repo := fakeRepo(t, hub, "Qwen", "Qwen3-4B", "abc123", "abc123", "zzz999")
		got, err := Resolve("Qwen/Qwen3-4B")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(repo, "snapshots", "abc123"), got, "refs/main wins over the newer snapshot")
	})
	t.Run("HF_HOME/hub when HF_HUB_CACHE lacks it", func(t *testing.T) {
		hub, hfHome, _ := isolate(t)
		require.NoError(t, os.MkdirAll(hub, 0o755))
		repo := fakeRepo(t, filepath.Join(hfHome, "hub"), "z-lab", "Qwen3-4B-DFlash-b16", "", "only")
		got, err := Resolve("z-lab/Qwen3-4B-DFlash-b16")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(repo, "snapshots", "only"), got)
	})
	t.Run("home cache, newest snapshot without refs", func(t *testing.T) {
		_, _, home := isolate(t)
		repo := fakeRepo(t, filepath.Join(home, ".cache", "huggingface", "hub"), "mlx-community", "Qwen3.5-4B-4bit", "", "old", "new")
		got, err := Resolve("mlx-community/Qwen3.5-4B-4bit")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(repo, "snapshots", "new"), got)
	})
	t.Run("stale refs/main falls back to snapshots", func(t *testing.T) {
		hub, _, _ := isolate(t)
		repo := fakeRepo(t, hub, "o", "n", "gone", "present")
		got, err := Resolve("o/n")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(repo, "snapshots", "present"), got)
	})
	t.Run("explicit revision", func(t *testing.T) {
		hub, _, _ := isolate(t)
		repo := fakeRepo(t, hub, "o", "n", "aaa", "aaa", "bbb")
		got, err := Resolve("o/n@bbb")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(repo, "snapshots", "bbb"), got)
		require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "v1"), []byte("aaa"), 0o644))
		got, err = Resolve("o/n@v1")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(repo, "snapshots", "aaa"), got)
		_, err = Resolve("o/n@ccc")
		require.ErrorIs(t, err, ErrModelNotFound)
	})
	t.Run("not found lists every place", func(t *testing.T) {
		hub, hfHome, home := isolate(t)
		_, err := Resolve("Qwen/Nope")
		require.ErrorIs(t, err, ErrModelNotFound)
		for _, p := range []string{hub, filepath.Join(hfHome, "hub"), filepath.Join(home, ".cache", "huggingface", "hub")} {
			assert.Contains(t, err.Error(), filepath.Join(p, "models--Qwen--Nope"))
		}
		assert.Contains(t, err.Error(), "never downloads")
	})
	t.Run("empty snapshots", func(t *testing.T) {
		hub, _, _ := isolate(t)
		require.NoError(t, os.MkdirAll(filepath.Join(hub, "models--o--n", "snapshots"), 0o755))
		_, err := Resolve("o/n")
		require.ErrorIs(t, err, ErrModelNotFound)
	})
	t.Run("not an id", func(t *testing.T) {
		isolate(t)
		for _, arg := range []string{"", "/does/not/exist", "a/b/c", "../x", "justname", "o/..", "o/n@../../x"} {
			_, err := Resolve(arg)
			require.ErrorIs(t, err, ErrModelNotFound, arg)
		}
	})
}
