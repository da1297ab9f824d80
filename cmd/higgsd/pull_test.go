package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/hub/hubtest"
	"github.com/higgs-go/higgs/app/models"
)

// pullEnv points the hub variables at a local hub serving the demo model as Qwen/Qwen3-4B and its drafter as
// that target's published drafter, with an empty cache.
func pullEnv(t *testing.T) (*hubtest.Server, string) {
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
	srv.AddDir(t, "Qwen/Qwen3-4B", filepath.Join("..", "..", models.DemoTargetDir))
	srv.AddDir(t, "z-lab/Qwen3-4B-DFlash-b16", filepath.Join("..", "..", models.DemoDrafterDir))
	return srv, cache
}

func TestPullCommand(t *testing.T) {
	srv, cache := pullEnv(t)
	var out, errb bytes.Buffer
	code := runPull(t.Context(), []string{"Qwen/Qwen3-4B", "--with-drafter"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	dirs := strings.Fields(out.String())
	require.Len(t, dirs, 2, out.String())
	target, err := hfmodel.Resolve("Qwen/Qwen3-4B")
	require.NoError(t, err)
	drafter, err := hfmodel.Resolve("z-lab/Qwen3-4B-DFlash-b16")
	require.NoError(t, err)
	assert.Equal(t, []string{target, drafter}, dirs)
	assert.True(t, strings.HasPrefix(target, cache))
	// Plain progress lines (stderr is not a terminal here): one as each file starts, one when it is done.
	assert.Contains(t, errb.String(), "Qwen/Qwen3-4B: model.safetensors (")
	assert.Contains(t, errb.String(), ") fetching\n")
	assert.Contains(t, errb.String(), ") done\n")
	assert.NotContains(t, errb.String(), "\x1b[", "no terminal escapes off a terminal")

	// Again, quietly: the cache answers, nothing is printed but the directories, and the hub is not asked.
	n := len(srv.Requests())
	out.Reset()
	errb.Reset()
	code = runPull(t.Context(), []string{"--quiet", "--with-drafter", "Qwen/Qwen3-4B"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	assert.Equal(t, target+"\n"+drafter+"\n", out.String())
	assert.Empty(t, errb.String())
	assert.Len(t, srv.Requests(), n)
}

func TestPullCommandErrors(t *testing.T) {
	srv, _ := pullEnv(t)
	srv.Token = "hf_right"
	srv.Gate("Qwen/Qwen3-4B")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"no id", nil, nil, 2, []string{"name a model"}},
		{"not an id", []string{"just-a-name"}, nil, 2, []string{`"just-a-name" is not a hub id`}},
		{"bad glob", []string{"--include", "[x", "Qwen/Qwen3-4B"}, nil, 1, []string{`--include "[x"`}},
		{"gated", []string{"Qwen/Qwen3-4B"}, nil, 1, []string{"401", "HF_TOKEN"}},
		{"no known drafter", []string{"--with-drafter", "z-lab/Qwen3-4B-DFlash-b16"}, nil, 1, []string{"no known drafter"}},
		{"offline", []string{"z-lab/Qwen3-4B-DFlash-b16"}, map[string]string{"HF_HUB_OFFLINE": "1"}, 1, []string{"HF_HUB_OFFLINE is set"}},
		{"unreachable", []string{"z-lab/Qwen3-4B-DFlash-b16"}, map[string]string{"HF_ENDPOINT": deadEndpoint(t)}, 1,
			[]string{"cannot reach the hub at http://127.0.0.1:", "HF_HUB_OFFLINE=1", "local model directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			code := runPull(t.Context(), tc.args, &out, &errb)
			assert.Equal(t, tc.code, code, errb.String())
			for _, w := range tc.want {
				assert.Contains(t, errb.String(), w)
			}
			assert.Empty(t, out.String())
		})
	}
	t.Setenv("HF_TOKEN", "hf_right")
	var out, errb bytes.Buffer
	require.Equal(t, 0, runPull(t.Context(), []string{"-quiet", "Qwen/Qwen3-4B"}, &out, &errb), errb.String())
}

// deadEndpoint is a loopback URL nothing listens on.
func deadEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}
