package models

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePooling(t *testing.T) {
	tests := []struct {
		name, raw string
		want      Pooling
		err       string
	}{
		{name: "qwen3-embedding", raw: `{"word_embedding_dimension": 1024, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false, "pooling_mode_lasttoken": true, "include_prompt": true}`,
			want: Pooling{Mode: PoolingLastToken, Dimension: 1024}},
		{name: "mean", raw: `{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true}`, want: Pooling{Mode: "mean", Dimension: 384}},
		{name: "two modes", raw: `{"pooling_mode_cls_token": true, "pooling_mode_lasttoken": true}`, want: Pooling{Mode: "cls+lasttoken"}},
		{name: "none", raw: `{"word_embedding_dimension": 8}`, err: "names no pooling mode"},
		{name: "negative", raw: `{"word_embedding_dimension": -1, "pooling_mode_lasttoken": true}`, err: "negative"},
		{name: "not json", raw: `{`, err: "pooling config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePooling([]byte(tt.raw))
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestReadPooling(t *testing.T) {
	dir := t.TempDir()
	p, err := ReadPooling(dir)
	require.NoError(t, err)
	assert.Equal(t, Pooling{}, p, "no pooling config")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, PoolingFile), []byte(`{"pooling_mode_lasttoken": true}`), 0o644))
	p, err = ReadPooling(dir)
	require.NoError(t, err)
	assert.Equal(t, PoolingLastToken, p.Mode)
}

func FuzzParsePooling(f *testing.F) {
	f.Add([]byte(`{"word_embedding_dimension": 1024, "pooling_mode_lasttoken": true}`))
	f.Add([]byte(`{"pooling_mode_mean_tokens": true}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParsePooling(raw)
		if err == nil {
			assert.NotEmpty(t, p.Mode, "a parsed config names a mode")
			assert.GreaterOrEqual(t, p.Dimension, 0)
		}
	})
}
