package app

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigDefaults(t *testing.T) {
	cfg, err := LoadConfig(nil, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig(), cfg)
	assert.Equal(t, "127.0.0.1:8000", cfg.Addr(), "localhost by default; a wider bind is explicit")
	assert.Equal(t, "", cfg.Model, "no model means the bundled demo")
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "higgs.toml")
	require.NoError(t, os.WriteFile(file, []byte(`
model = "from-file"
port = 9000
block_size = 4
request-timeout = "30s"
adaptive = true
host = "0.0.0.0"
`), 0o644))
	e := env(map[string]string{"HIGGS_CONFIG": file, "HIGGS_PORT": "9001", "HIGGS_API_KEY": "env-key", "HIGGS_BLOCK_SIZE": "6"})
	cfg, err := LoadConfig([]string{"--port", "9002"}, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 9002, cfg.Port, "flag beats env and file")
	assert.Equal(t, 6, cfg.BlockSize, "env beats file")
	assert.Equal(t, []string{"env-key"}, cfg.APIKeys)
	assert.Equal(t, "from-file", cfg.Model, "file beats default")
	assert.Equal(t, 30*time.Second, cfg.RequestTimeout)
	assert.True(t, cfg.Adaptive)
	assert.Equal(t, "0.0.0.0", cfg.Host)
	assert.Equal(t, file, cfg.ConfigFile)

	// --config on the command line beats HIGGS_CONFIG.
	other := filepath.Join(dir, "other.toml")
	require.NoError(t, os.WriteFile(other, []byte(`model = "other"`), 0o644))
	cfg, err = LoadConfig([]string{"--config", other}, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "other", cfg.Model)
}

// --kv-bits reaches the model config from a flag, the environment and a TOML file.
func TestConfigKVBits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "h.toml")
	require.NoError(t, os.WriteFile(file, []byte("kv_bits = 8\n"), 0o644))
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"flag": {args: []string{"--kv-bits", "8"}},
		"env":  {env: map[string]string{"HIGGS_KV_BITS": "8"}},
		"toml": {args: []string{"--config", file}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig(c.args, env(c.env), io.Discard)
			require.NoError(t, err)
			assert.Equal(t, 8, cfg.ModelConfig().KVBits)
		})
	}
	cfg, err := LoadConfig(nil, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Zero(t, cfg.ModelConfig().KVBits, "full precision by default")
}

func TestConfigReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(file, []byte("colour = \"red\"\nport = \"eighty\"\n"), 0o644))
	_, err := LoadConfig([]string{"--config", file, "--log-format", "xml", "--max-concurrency", "0", "--backend", "gpu", "--kernels", "turbo",
		"--threads", "100000", "--kv-bits", "4"},
		env(map[string]string{"HIGGS_QUEUE_SIZE": "many", "HIGGS_BLOCK_SIZE": "-2"}), io.Discard)
	require.Error(t, err)
	for _, want := range []string{`unknown key "colour"`, "port", "HIGGS_QUEUE_SIZE", "--block-size -2", `--log-format "xml"`,
		"--max-concurrency 0", `unknown backend "gpu"`, `unknown kernels "turbo"`,
		"threads 100000 must be in [0, 1024]", "kv bits 4: want 0 (full precision), 32 (cpu) or 8"} {
		assert.ErrorContains(t, err, want)
	}
}

func TestConfigHelpAndArgs(t *testing.T) {
	_, err := LoadConfig([]string{"-h"}, env(nil), io.Discard)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	_, err = LoadConfig([]string{"stray"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "unexpected arguments")
	_, err = LoadConfig([]string{"--config", "/nonexistent/h.toml"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "config file")
}

func TestConfigNoDraftTurnsSpeculationOff(t *testing.T) {
	cfg, err := LoadConfig([]string{"--no-draft", "--block-size", "8"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1, cfg.ServeConfig().BlockSize)
	assert.True(t, cfg.ModelConfig().NoDraft)
}

func TestEnvName(t *testing.T) {
	assert.Equal(t, "HIGGS_MAX_BODY_BYTES", EnvName("max-body-bytes"))
}

// Log durations carry their unit: "took=41.9" was a number of milliseconds nobody could tell from seconds.
func TestLoggerDurationsHaveUnits(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		cfg := DefaultConfig()
		cfg.LogFormat = format
		var buf strings.Builder
		log := NewLogger(cfg, &buf)
		log.Info().Dur("took", 41900*time.Microsecond).Dur("deadline", 30*time.Second).Msg("x")
		assert.Contains(t, buf.String(), "41.9ms", format)
		assert.Contains(t, buf.String(), "30s", format)
	}
}

func TestConfigSafetyFlags(t *testing.T) {
	cfg, err := LoadConfig([]string{"--special-tokens-in-content", "--body-timeout", "5s"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.ServeConfig().SpecialTokensInContent)
	assert.Equal(t, 5*time.Second, cfg.BodyTimeout)
	def, err := LoadConfig(nil, env(nil), io.Discard)
	require.NoError(t, err)
	assert.False(t, def.ServeConfig().SpecialTokensInContent, "client text is plain text by default")
	assert.Equal(t, 30*time.Second, def.BodyTimeout)
	_, err = LoadConfig([]string{"--body-timeout", "0s"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--body-timeout")
}

func TestConfigPrefixCache(t *testing.T) {
	cfg, err := LoadConfig(nil, env(map[string]string{"HIGGS_PREFIX_CACHE_BYTES": "0"}), io.Discard)
	require.NoError(t, err)
	assert.Zero(t, cfg.ServeConfig().PrefixCacheBytes, "0 turns the cache off")
	cfg, err = LoadConfig([]string{"--prefix-cache-bytes", "4096", "--prefix-cache-every", "64"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, int64(4096), cfg.ServeConfig().PrefixCacheBytes)
	assert.Equal(t, 64, cfg.ServeConfig().PrefixCacheEvery)
	assert.Equal(t, int64(1<<30), DefaultConfig().ServeConfig().PrefixCacheBytes, "on by default, 1 GiB")
	_, err = LoadConfig([]string{"--prefix-cache-bytes", "-1", "--prefix-cache-every", "-2"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--prefix-cache-bytes -1")
	assert.ErrorContains(t, err, "--prefix-cache-every -2")
	_, err = serve.NewServe(serve.ServeConfig{MaxConcurrency: 1, PrefixCacheBytes: -1}, zerolog.Nop())
	assert.ErrorContains(t, err, "prefix cache budget -1")
}

// --rank-timeout (default 10s) reaches the model config from a flag, the environment or the TOML file, and
// must be positive.
func TestConfigRankTimeout(t *testing.T) {
	def, err := LoadConfig(nil, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, def.ModelConfig().RankTimeout, "ten seconds by default")
	cfg, err := LoadConfig([]string{"--rank-timeout", "3s"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, cfg.ModelConfig().RankTimeout)
	cfg, err = LoadConfig(nil, env(map[string]string{"HIGGS_RANK_TIMEOUT": "4s"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 4*time.Second, cfg.ModelConfig().RankTimeout)
	file := filepath.Join(t.TempDir(), "higgs.toml")
	require.NoError(t, os.WriteFile(file, []byte("rank_timeout = \"5s\"\n"), 0o644))
	cfg, err = LoadConfig([]string{"--config", file}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, cfg.ModelConfig().RankTimeout)
	for _, bad := range []string{"0s", "-1s"} {
		_, err = LoadConfig([]string{"--rank-timeout", bad}, env(nil), io.Discard)
		assert.ErrorContains(t, err, "--rank-timeout "+strings.TrimSuffix(bad, "s"), bad)
	}
}

// TestConfigPrefixCacheDisk: the disk tier's directory and budget from flags and the TOML file (a size with a
// unit), their checks, and the defaults (no directory, 8 GiB once one is set).
func TestConfigPrefixCacheDisk(t *testing.T) {
	def, err := LoadConfig(nil, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Empty(t, def.ServeConfig().PrefixCacheDir, "memory only by default")
	assert.Equal(t, int64(8<<30), def.ServeConfig().PrefixCacheDiskBytes)

	dir := t.TempDir()
	cfg, err := LoadConfig([]string{"--prefix-cache-dir", dir, "--prefix-cache-disk-bytes", "2GiB"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, dir, cfg.ServeConfig().PrefixCacheDir)
	assert.Equal(t, int64(2<<30), cfg.ServeConfig().PrefixCacheDiskBytes)

	file := writeFile(t, "higgs.toml", "prefix_cache_dir = \""+dir+"\"\nprefix_cache_disk_bytes = \"512MiB\"\n")
	cfg, err = LoadConfig([]string{"--config", file}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, dir, cfg.ServeConfig().PrefixCacheDir)
	assert.Equal(t, int64(512<<20), cfg.ServeConfig().PrefixCacheDiskBytes)

	_, err = LoadConfig([]string{"--prefix-cache-dir", dir, "--prefix-cache-disk-bytes", "0"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--prefix-cache-dir needs --prefix-cache-disk-bytes > 0")
	_, err = LoadConfig([]string{"--prefix-cache-dir", dir, "--prefix-cache-bytes", "0"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--prefix-cache-dir needs the prefix cache on")
	_, err = LoadConfig([]string{"--prefix-cache-disk-bytes", "-1"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--prefix-cache-disk-bytes -1")
}

// TestTreeBudgetSettings: --tree-budget's default is the engine's auto value; -1, 0 and budgets ≥ 2 are
// accepted, 1 and below -1 refused; the value reaches the serving configuration.
func TestTreeBudgetSettings(t *testing.T) {
	assert.Equal(t, generation.TreeAuto, TreeAuto)
	assert.Equal(t, TreeAuto, DefaultConfig().TreeBudget)
	for _, tc := range []struct {
		arg string
		ok  bool
	}{{"-1", true}, {"0", true}, {"2", true}, {"24", true}, {"1", false}, {"-2", false}} {
		c, err := LoadConfig([]string{"--tree-budget", tc.arg, "--tree-width", "3"}, func(string) string { return "" }, io.Discard)
		if !tc.ok {
			assert.ErrorContains(t, err, "--tree-budget", tc.arg)
			continue
		}
		require.NoError(t, err, tc.arg)
		sc := c.ServeConfig()
		assert.Equal(t, c.TreeBudget, sc.TreeBudget)
		assert.Equal(t, 3, sc.TreeWidth)
	}
	_, err := LoadConfig([]string{"--tree-width", "-1"}, func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "--tree-width")
	// A tree's draft is narrow unless --tree-full-draft.
	c, err := LoadConfig(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.False(t, c.ServeConfig().TreeFullDraft)
	c, err = LoadConfig([]string{"--tree-full-draft"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.True(t, c.ServeConfig().TreeFullDraft)
}
