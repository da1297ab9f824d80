package app

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hub"
)

func TestParsePull(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want PullConfig
		err  string
	}{
		{args: []string{"Qwen/Qwen3-4B"}, want: PullConfig{IDs: []string{"Qwen/Qwen3-4B"}}},
		{args: []string{"a/b@v1", "--quiet", "c/d", "--include", "*.json,*.safetensors", "--include", "x.txt", "--refresh", "--with-drafter"},
			want: PullConfig{IDs: []string{"a/b@v1", "c/d"}, Include: []string{"*.json", "*.safetensors", "x.txt"}, Quiet: true, Refresh: true, WithDrafter: true}},
		{args: nil, err: "name a model"},
		{args: []string{"--quiet"}, err: "name a model"},
		{args: []string{"a/b", "nope", "../x"}, err: `"nope" is not a hub id`},
		{args: []string{"--bogus", "a/b"}, err: "flag provided but not defined"},
	} {
		got, err := ParsePull(tc.args, io.Discard)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "%q", tc.args)
			continue
		}
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.want, got, "%q", tc.args)
	}
}

func TestPullProgress(t *testing.T) {
	events := []hub.Event{
		{Repo: "o/m", File: "config.json", Done: 10, Size: 10, Finished: true, Cached: true},
		{Repo: "o/m", File: "model.safetensors", Done: 0, Size: 2048},
		{Repo: "o/m", File: "model.safetensors", Done: 1024, Size: 2048},
		{Repo: "o/m", File: "model.safetensors", Done: 2048, Size: 2048, Finished: true},
		{Repo: "o/m", File: "tokenizer.json", Done: 512, Size: 1024},
		{Repo: "o/m", File: "tokenizer.json", Done: 1024, Size: 1024, Finished: true},
	}
	var plain bytes.Buffer
	p := PullProgress(&plain, false)
	for _, e := range events {
		p(e)
	}
	assert.Equal(t, "o/m: config.json (10B) already in the cache\n"+
		"o/m: model.safetensors (2KiB) fetching\n"+
		"o/m: model.safetensors (2KiB) done\n"+
		"o/m: tokenizer.json (1KiB) fetching, resuming at 512B\n"+
		"o/m: tokenizer.json (1KiB) done\n", plain.String())

	var bar bytes.Buffer
	p = PullProgress(&bar, true)
	for _, e := range events {
		p(e)
	}
	assert.Contains(t, bar.String(), "o/m/config.json (10B) already in the cache")
	assert.Contains(t, bar.String(), "o/m/model.safetensors")
	assert.Contains(t, bar.String(), "100%")
}
