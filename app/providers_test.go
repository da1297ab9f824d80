package app

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProviderFlags(t *testing.T) {
	cfg, err := LoadConfig([]string{
		"--provider", "claude=anthropic,https://api.anthropic.com,key_env=ANT_KEY",
		"--provider", "oai=openai,http://127.0.0.1:8001/v1",
		"--route", "claude-.*=claude", "--route", "gpt-(4o|5),x=oai",
	}, env(map[string]string{"ANT_KEY": "sk-ant-1"}), io.Discard)
	require.NoError(t, err)
	providers, routes, err := cfg.Routing()
	require.NoError(t, err)
	assert.Equal(t, []ProviderSpec{
		{Name: "claude", Format: FormatAnthropic, URL: "https://api.anthropic.com", KeyEnv: "ANT_KEY"},
		{Name: "oai", Format: FormatOpenAI, URL: "http://127.0.0.1:8001/v1"},
	}, providers)
	assert.Equal(t, []RouteSpec{{Pattern: "claude-.*", Provider: "claude"}, {Pattern: "gpt-(4o|5),x", Provider: "oai"}}, routes)
	assert.Equal(t, map[string]string{"claude": "sk-ant-1"}, cfg.providerKeys)
}

func TestProviderTOML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "higgs.toml")
	require.NoError(t, os.WriteFile(file, []byte(`
[[providers]]
name = "claude"
format = "anthropic"
url = "https://api.anthropic.com"
key_env = "ANT_KEY"

[[providers]]
name = "local2"
format = "openai"
url = "http://127.0.0.1:8001"

[[routes]]
match = "claude-.*"
provider = "claude"

[[routes]]
match = "qwen=big"
provider = "local2"
`), 0o644))
	cfg, err := LoadConfig([]string{"--config", file}, env(map[string]string{"ANT_KEY": "k"}), io.Discard)
	require.NoError(t, err)
	providers, routes, err := cfg.Routing()
	require.NoError(t, err)
	assert.Len(t, providers, 2)
	assert.Equal(t, "local2", providers[1].Name)
	assert.Equal(t, []RouteSpec{{Pattern: "claude-.*", Provider: "claude"}, {Pattern: "qwen=big", Provider: "local2"}}, routes)

	// The command line replaces the file's list.
	cfg, err = LoadConfig([]string{"--config", file, "--route", "x=local2"}, env(map[string]string{"ANT_KEY": "k"}), io.Discard)
	require.NoError(t, err)
	_, routes, err = cfg.Routing()
	require.NoError(t, err)
	assert.Equal(t, []RouteSpec{{Pattern: "x", Provider: "local2"}}, routes)
}

// TestProviderProblems: every problem of the providers and routes is reported at once, each naming its
// flag; a key is never part of a message.
func TestProviderProblems(t *testing.T) {
	_, err := LoadConfig([]string{
		"--provider", "a=grpc,http://x",
		"--provider", "b=openai,ftp://x",
		"--provider", "c=openai,http://x,key_env=1BAD",
		"--provider", "d=openai,http://x,timeout=3",
		"--provider", "e",
		"--provider", "f=openai,http://user:pw@x",
		"--provider", "g=openai,http://x", "--provider", "g=anthropic,http://y",
		"--route", "claude-(=g", "--route", "x=nobody", "--route", "noprovider",
	}, env(nil), io.Discard)
	require.Error(t, err)
	for _, want := range []string{
		`--provider a: format "grpc": want openai or anthropic`,
		`--provider b: URL "ftp://x": want http:// or https:// and a host`,
		`--provider c: key_env "1BAD" is not an environment variable name`,
		`--provider d: unknown option "timeout=3"`,
		`--provider "e": want NAME=openai|anthropic,URL[,key_env=VAR]`,
		`--provider f: the URL must not hold credentials`,
		`--provider g is declared twice`,
		`--route "claude-(=g"`,
		`--route "x=nobody": no --provider is named "nobody"`,
		`--route "noprovider": want REGEX=PROVIDER`,
	} {
		assert.Contains(t, err.Error(), want)
	}

	_, err = LoadConfig([]string{"--provider", "c=anthropic,https://x,key_env=ANT_KEY"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, "--provider c: key_env ANT_KEY is unset or empty")

	file := filepath.Join(t.TempDir(), "h.toml")
	require.NoError(t, os.WriteFile(file, []byte("[[providers]]\nname = \"a\"\nurl = 3\nextra = \"x\"\n"), 0o644))
	_, err = LoadConfig([]string{"--config", file}, env(nil), io.Discard)
	require.Error(t, err)
	for _, want := range []string{"[[providers]]: entry 1", `unknown key "extra"`, "url must be a string", "format is required"} {
		assert.Contains(t, err.Error(), want)
	}
}
