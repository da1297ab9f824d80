package models

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/hub/hubtest"
)

// fakeHub serves the demo model as Qwen/Qwen3-4B and its drafter as Qwen3-4B's published drafter, from a
// local hub the environment points at, with an empty hub cache.
func fakeHub(t *testing.T) (*hubtest.Server, string) {
	t.Helper()
	root := t.TempDir()
	cache := filepath.Join(root, "hub")
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HOME", filepath.Join(root, "hfhome"))
	t.Setenv("HOME", filepath.Join(root, "home"))
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_TOKEN", "")
	srv := hubtest.New(t)
	t.Setenv("HF_ENDPOINT", srv.URL())
	srv.AddDir(t, "Qwen/Qwen3-4B", filepath.Join("..", "..", DemoTargetDir))
	srv.AddDir(t, "z-lab/Qwen3-4B-DFlash-b16", filepath.Join("..", "..", DemoDrafterDir))
	return srv, cache
}

// With --pull, a hub target missing from the cache and the drafter --draft auto picks for it are downloaded,
// then loaded from the cache.
func TestLoadPullsTargetAndAutoDrafter(t *testing.T) {
	srv, cache := fakeHub(t)
	cfg := ModelConfig{Model: "Qwen/Qwen3-4B", Draft: AutoDraftName, Pull: true, Backend: BackendCPU, Kernels: KernelsExact}
	m, err := LoadModels(t.Context(), cfg, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer m.Close()
	assert.Equal(t, "Qwen/Qwen3-4B", m.Name)
	assert.True(t, strings.HasPrefix(m.TargetDir, filepath.Join(cache, "models--Qwen--Qwen3-4B", "snapshots")), m.TargetDir)
	assert.True(t, strings.HasPrefix(m.DrafterDir, filepath.Join(cache, "models--z-lab--Qwen3-4B-DFlash-b16", "snapshots")), m.DrafterDir)
	require.NotNil(t, m.Drafter)
	require.NotNil(t, m.Tokenizer)
	n := len(srv.Requests())

	// The second start finds both in the cache, even offline, and asks the hub nothing.
	t.Setenv("HF_HUB_OFFLINE", "1")
	m2, err := LoadModels(t.Context(), cfg, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer m2.Close()
	assert.Equal(t, m.DrafterDir, m2.DrafterDir)
	assert.Len(t, srv.Requests(), n)
}

// Without --pull nothing is downloaded: a missing target or drafter is an error naming the pull command.
func TestLoadWithoutPullNeverDownloads(t *testing.T) {
	srv, _ := fakeHub(t)
	_, err := LoadModels(t.Context(), ModelConfig{Model: "Qwen/Qwen3-4B", Draft: AutoDraftName}, zerolog.Nop(), nil)
	require.ErrorIs(t, err, hfmodel.ErrModelNotFound)
	assert.ErrorContains(t, err, "higgsd pull Qwen/Qwen3-4B")
	_, err = LoadModels(t.Context(), ModelConfig{Model: "Qwen/Qwen3-4B", Draft: "z-lab/Qwen3-4B-DFlash-b16"}, zerolog.Nop(), nil)
	require.ErrorIs(t, err, hfmodel.ErrModelNotFound)
	assert.Empty(t, srv.Requests())

	// The target alone is pulled; --draft auto then names the drafter to pull.
	_, err = LoadModels(t.Context(), ModelConfig{Model: "Qwen/Qwen3-4B", NoDraft: true, Pull: true}, zerolog.Nop(), nil)
	require.NoError(t, err)
	_, err = LoadModels(t.Context(), ModelConfig{Model: "Qwen/Qwen3-4B", Draft: AutoDraftName}, zerolog.Nop(), nil)
	require.ErrorIs(t, err, hfmodel.ErrModelNotFound)
	assert.ErrorContains(t, err, "higgsd pull z-lab/Qwen3-4B-DFlash-b16")
	assert.ErrorContains(t, err, "--pull")
}

func TestAutoDrafterWithoutKnownPair(t *testing.T) {
	fakeHub(t)
	_, err := LoadModels(t.Context(), ModelConfig{Model: filepath.Join("..", "..", DemoTargetDir), Draft: AutoDraftName, Pull: true},
		zerolog.Nop(), nil)
	require.Error(t, err)
	assert.ErrorContains(t, err, "--draft auto: no known drafter")
	assert.ErrorContains(t, err, "Qwen/Qwen3.5-4B", "the error lists the known targets")

	// With the bundled model, auto is its own drafter (found from the repository root).
	t.Chdir(filepath.Join("..", ".."))
	dir, err := autoDrafter(t.Context(), ModelConfig{Draft: AutoDraftName}, zerolog.Nop())
	require.NoError(t, err)
	assert.Equal(t, DefaultDrafterDir, dir)
}
