package app

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4194304": 4194304, "4GiB": 4 << 30, "4gib": 4 << 30, "512MiB": 512 << 20, "1.5GB": 1_500_000_000,
		"64 KiB": 64 << 10, " 2Gi ": 2 << 30, "1.5GiB": 3 << 29, "10B": 10, "3k": 3000, "2M": 2_000_000,
		"1TiB": 1 << 40, "0.5KiB": 512, "-1": -1, "+5": 5, "1.": 1, ".5KB": 500, "9223372036854775807": math.MaxInt64,
	} {
		got, err := ParseByteSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", " ", "GiB", "4 GiBs", "4XB", "0x10", "1e9", "1e3KB", "NaN", "Inf", "infGB", "1.2.3MB",
		"4-GiB", "--4", "9999999TiB", "9223372036854775808", "1,5GB", "."} {
		_, err := ParseByteSize(in)
		assert.Error(t, err, "%q", in)
	}
}

// FuzzParseByteSize: the parser never panics, accepts what FormatByteSize writes, and a value it accepts
// with a binary unit is the number times the unit.
func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"4GiB", "512MiB", "1.5GB", "4194304", "-1", "0.5KiB", " 7 kb", "1e9", "9999999TiB", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseByteSize(s)
		if err != nil {
			return
		}
		back, err := ParseByteSize(FormatByteSize(n))
		if n >= 0 {
			require.NoError(t, err, "FormatByteSize(%d) = %q", n, FormatByteSize(n))
			require.Equal(t, n, back, "round trip of %q", s)
		}
		if t := strings.TrimSpace(s); len(t) > 0 && strings.ContainsAny(t, "0123456789") && !strings.ContainsAny(t, "eExXnN") {
			return
		}
		t.Fatalf("%q parsed as %d but has no digits or has a letter only a wider syntax would take", s, n)
	})
}

func TestFormatByteSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 4 << 20: "4MiB", 1 << 30: "1GiB", 1000: "1000B", 1536: "1536B", 3 << 40: "3TiB"} {
		assert.Equal(t, want, FormatByteSize(n), n)
	}
}

// TestConfigSizesWithUnits: every byte-size setting takes units on the command line, in the environment
// and in the TOML file; plain bytes still work, and a bad size names its flag.
func TestConfigSizesWithUnits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "higgs.toml")
	require.NoError(t, os.WriteFile(file, []byte("prefix_cache_bytes = \"512MiB\"\n"), 0o644))
	cfg, err := LoadConfig([]string{"--memory-budget-bytes", "4GiB", "--config", file},
		env(map[string]string{"HIGGS_MAX_BODY_BYTES": "1.5MB"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, int64(4<<30), cfg.MemoryBudget)
	assert.Equal(t, int64(512<<20), cfg.PrefixCacheBytes)
	assert.Equal(t, int64(1_500_000), cfg.MaxBodyBytes)
	assert.Equal(t, int64(4<<30), cfg.ServeConfig().MemoryBudget)

	require.NoError(t, os.WriteFile(file, []byte("prefix_cache_bytes = 4096\n"), 0o644))
	cfg, err = LoadConfig([]string{"--max-body-bytes", "2048", "--config", file}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, int64(2048), cfg.MaxBodyBytes)
	assert.Equal(t, int64(4096), cfg.PrefixCacheBytes, "a TOML number is bytes")

	_, err = LoadConfig([]string{"--memory-budget-bytes", "4GB!"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "memory-budget-bytes")
	_, err = LoadConfig([]string{"--max-body-bytes", "1KiB", "--prefix-cache-bytes", "-1KiB"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--prefix-cache-bytes -1024")
	assert.NotContains(t, err.Error(), "max-body-bytes", "1KiB is the smallest body limit")

	var help strings.Builder
	_, _ = LoadConfig([]string{"-h"}, env(nil), &help)
	assert.Contains(t, help.String(), "(default 4MiB)", "defaults are shown with units")
	assert.Contains(t, help.String(), "(default 1GiB)")
}

func TestConfigLimitsAndVersion(t *testing.T) {
	cfg, err := LoadConfig([]string{"--default-max-tokens", "256", "--context-length", "8192"}, env(nil), io.Discard)
	require.NoError(t, err)
	sc := cfg.ServeConfig()
	assert.Equal(t, 256, sc.DefaultMaxTokens)
	assert.Equal(t, 8192, sc.ContextLength)
	cfg, err = LoadConfig(nil, env(map[string]string{"HIGGS_DEFAULT_MAX_TOKENS": "-1"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, -1, cfg.ServeConfig().DefaultMaxTokens)

	_, err = LoadConfig([]string{"--default-max-tokens", "-2", "--context-length", "-1"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--default-max-tokens -2")
	assert.ErrorContains(t, err, "--context-length -1")

	// --version answers even beside a setting that would not validate.
	cfg, err = LoadConfig([]string{"--version"}, env(map[string]string{"HIGGS_PORT": "99999"}), io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.Version)
	assert.True(t, strings.HasPrefix(Version("higgsd"), "higgsd "))
}

func TestVersionOf(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/higgs-go/higgs", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "5c48e44"}, {Key: "vcs.time", Value: "2026-12-06T04:00:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	got := versionOf("higgsd", info)
	assert.True(t, strings.HasPrefix(got, "higgsd v0.4.0 (github.com/higgs-go/higgs) revision 5c48e44 2026-12-06T04:00:00Z modified go1.26.0 "), got)
	assert.True(t, strings.HasPrefix(versionOf("higgsd", &debug.BuildInfo{}), "higgsd (devel) "))
}
