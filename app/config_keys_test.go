package app

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// tenantOf identifies key with cfg's keys.
func tenantOf(t *testing.T, cfg Config, key string) (ports.Tenant, bool) {
	t.Helper()
	keys, err := cfg.Keys()
	require.NoError(t, err)
	id, ok := keys.Identify(key)
	return id.Tenant, ok
}

// --api-key may be repeated and read from a file (one a line: surrounding spaces trimmed, blank lines and #
// comments skipped, CRLF endings too); each key is a tenant, in order: the flags', then the file's.
func TestConfigKeys(t *testing.T) {
	file := writeFile(t, "keys.txt", "# tenants\n\n  file-one  \r\nfile-two\n\t\n   # indented comment\nfile#three\n")
	cfg, err := LoadConfig([]string{"--api-key", "flag-one", "--api-key", "flag-two", "--api-key-file", file,
		"--admin-key", "root"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"flag-one", "flag-two"}, cfg.APIKeys)
	keys, err := cfg.Keys()
	require.NoError(t, err)
	assert.Equal(t, 5, keys.Tenants())
	for key, want := range map[string]ports.Tenant{"flag-one": "tenant-1", "flag-two": "tenant-2", "file-one": "tenant-3",
		"file-two": "tenant-4", "file#three": "tenant-5", "root": httpapi.OperatorTenant} {
		got, ok := tenantOf(t, cfg, key)
		assert.True(t, ok, key)
		assert.Equal(t, want, got, key)
	}
	for _, bad := range []string{"# tenants", "  file-one  ", "", "tenant-1"} {
		_, ok := tenantOf(t, cfg, bad)
		assert.False(t, ok, "%q is no key", bad)
	}
	assert.False(t, cfg.ExposedWithoutKey())

	// Without keys: no authentication, one tenant.
	cfg, err = LoadConfig(nil, env(nil), io.Discard)
	require.NoError(t, err)
	got, ok := tenantOf(t, cfg, "")
	assert.True(t, ok)
	assert.Equal(t, ports.Tenant(""), got)
}

// A duplicate key (in the flags, the file, across them, or as the admin key), a key no client could send, an
// empty or missing key file: each refused at start, all at once, naming where — never the key.
func TestConfigKeysRefused(t *testing.T) {
	file := writeFile(t, "keys.txt", "dup-key\nother\ndup-key\nflag-key\n")
	_, err := LoadConfig([]string{"--api-key", "flag-key", "--api-key", "flag-key", "--api-key", "with space",
		"--api-key-file", file, "--admin-key", "other"}, env(nil), io.Discard)
	require.Error(t, err)
	for _, want := range []string{
		"API key (--api-key 2) repeats the key of --api-key 1",
		"API key (--api-key 3): holds a space",
		"API key (" + file + ":3) repeats the key of " + file + ":1",
		"API key (" + file + ":4) repeats the key of --api-key 1",
		"the admin key repeats the API key of " + file + ":2",
	} {
		assert.ErrorContains(t, err, want)
	}
	for _, key := range []string{"dup-key", "flag-key", "other"} {
		assert.NotContains(t, err.Error(), "\""+key+"\"")
	}

	empty := writeFile(t, "empty.txt", "# nobody yet\n\n")
	_, err = LoadConfig([]string{"--api-key-file", empty}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "holds no key")
	_, err = LoadConfig([]string{"--api-key-file", filepath.Join(t.TempDir(), "missing")}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--api-key-file")
}

// Keys from a TOML file (a string or an array), replaced as a whole by the environment's, which the command
// line replaces in turn; the shared cache is a setting like the others.
func TestConfigKeysPrecedence(t *testing.T) {
	file := writeFile(t, "higgs.toml", "api_key = [\"toml-one\", \"toml-two\"]\nadmin_key = \"toml-root\"\nprefix_cache_shared = true\n")
	cfg, err := LoadConfig([]string{"--config", file}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"toml-one", "toml-two"}, cfg.APIKeys)
	assert.Equal(t, "toml-root", cfg.AdminKey)
	assert.True(t, cfg.PrefixCacheShared)
	assert.True(t, cfg.ServeConfig().PrefixCacheShared)

	e := env(map[string]string{"HIGGS_API_KEY": "env-key", "HIGGS_PREFIX_CACHE_SHARED": "false"})
	cfg, err = LoadConfig([]string{"--config", file}, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"env-key"}, cfg.APIKeys, "the environment replaces the file's keys")
	assert.False(t, cfg.PrefixCacheShared)

	cfg, err = LoadConfig([]string{"--config", file, "--api-key", "flag-key"}, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"flag-key"}, cfg.APIKeys, "the command line replaces both")

	single := writeFile(t, "one.toml", "api-key = \"just-one\"\n")
	cfg, err = LoadConfig([]string{"--config", single}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"just-one"}, cfg.APIKeys)

	bad := writeFile(t, "bad.toml", "port = [1, 2]\napi_key = [1]\n")
	_, err = LoadConfig([]string{"--config", bad}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "port: a list holds strings")
	assert.ErrorContains(t, err, "api_key: a list holds strings")
	bad = writeFile(t, "bad2.toml", "port = [\"1\"]\n")
	_, err = LoadConfig([]string{"--config", bad}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "port: a list is not a value of this setting")
}

// The usage text never prints a key.
func TestConfigUsageHidesKeys(t *testing.T) {
	var cfg Config
	cfg.APIKeys = []string{"secret-one"}
	assert.Equal(t, "(1 keys)", (*keyList)(&cfg.APIKeys).String())
}
