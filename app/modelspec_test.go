package app

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/internal/readme"
	"github.com/higgs-go/higgs/ports"
)

func dur(d time.Duration) *time.Duration { return &d }

func fl(x float64) *float64 { return &x }

func in(x int) *int { return &x }

func TestConfigModelFlags(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		model string
		want  []ModelSpec
	}{
		{"no model: the bundled gocoder", nil, "", nil},
		{"today's --model PATH", []string{"--model", "models/demo/target"}, "models/demo/target", nil},
		{"the last PATH wins, as before", []string{"--model", "a", "--model", "b"}, "b", nil},
		{"a PATH with a comma but no '=' is a path", []string{"--model", "dir,v2/target"}, "dir,v2/target", nil},
		{"two named models", []string{
			"--model", "coder=models/gocoder/target,draft=models/gocoder/drafter,alias=gocoder,alias=c",
			"--model", "demo = models/demo/target , keep-alive=10m, kernels=exact, backend=cpu"}, "",
			[]ModelSpec{
				{Name: "coder", Path: "models/gocoder/target", Draft: "models/gocoder/drafter", Aliases: []string{"gocoder", "c"}},
				{Name: "demo", Path: "models/demo/target", KeepAlive: dur(10 * time.Minute), Kernels: "exact", Backend: "cpu"},
			}},
		{"default sampling", []string{"--model", "a=x,temperature=0.6,top_p=0.95,top_k=20,min_p=0"}, "", []ModelSpec{
			{Name: "a", Path: "x", Sampling: ports.SamplingDefaults{Temperature: fl(0.6), TopP: fl(0.95), TopK: in(20), MinP: fl(0)}},
		}},
		{"keep_alive in seconds, 0 and negative", []string{"--model", "a=x,keep_alive=90", "--model", "b=y,keep_alive=0",
			"--model", "c=z,keep_alive=-1"}, "", []ModelSpec{
			{Name: "a", Path: "x", KeepAlive: dur(90 * time.Second)},
			{Name: "b", Path: "y", KeepAlive: dur(0)},
			{Name: "c", Path: "z", KeepAlive: dur(-time.Second)},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := LoadConfig(c.args, env(nil), io.Discard)
			require.NoError(t, err)
			assert.Equal(t, c.model, cfg.Model)
			assert.Equal(t, c.want, cfg.Models)
		})
	}
}

func TestConfigModelFlagErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown key", []string{"--model", "a=x,drafter=y"}, []string{`--model "a=x,drafter=y": unknown key "drafter" (want one of draft, alias, backend, kernels, keep_alive, temperature, top_p, top_k, min_p)`}},
		{"key without value", []string{"--model", "a=x,alias"}, []string{`"alias": want key=value`}},
		{"bad keep-alive", []string{"--model", "a=x,keep_alive=soon"}, []string{`keep_alive "soon": want a duration such as 5m or 1h`}},
		{"no name", []string{"--model", "=x", "--model", "b=y"}, []string{`model 1 (""): no name`}},
		{"no path", []string{"--model", "a=", "--model", "b=y"}, []string{`model 1 ("a"): no path`}},
		{"taken twice", []string{"--model", "a=x,alias=b", "--model", "b=y"}, []string{`model 2 ("b"): name or alias "b" is already taken`}},
		{"a name with a space", []string{"--model", "a=x,alias=my model"}, []string{`name or alias "my model" must not hold spaces`}},
		{"bare path beside named", []string{"--model", "x", "--model", "b=y"}, []string{`--model "x" is a bare path beside named models: write NAME=PATH for every model`}},
		{"--draft with named", []string{"--model", "a=x", "--draft", "d"}, []string{"--draft names the drafter of a single model"}},
		{"--served-model-name with named", []string{"--model", "a=x", "--served-model-name", "n"}, []string{"--served-model-name renames a single model"}},
		{"a model's bad kernels", []string{"--model", "a=x,kernels=turbo"}, []string{`model 1 ("a"): `, "turbo"}},
		{"bad sampling number", []string{"--model", "a=x,temperature=hot,top_k=1.5"}, []string{`temperature "hot": want a number`, `top_k "1.5": want a whole number`}},
		{"sampling out of range", []string{"--model", "a=x,top_p=0,temperature=300"}, []string{`model 1 ("a"): default sampling: top_p 0 must be greater than 0`, "temperature 300 out of range"}},
		{"--distributed with several", []string{"--model", "a=x", "--model", "b=y", "--distributed", "--backend", "mlx"}, []string{"--distributed splits one model across processes: it cannot serve several"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadConfig(c.args, env(nil), io.Discard)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConfigModelTables(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "higgs.toml")
	require.NoError(t, os.WriteFile(file, []byte(`
keep_alive = "2m"

[[models]]
name = "coder"
path = "models/gocoder/target"
draft = "models/gocoder/drafter"
aliases = ["gocoder", "default"]

[[models]]
name = "demo"
path = "models/demo/target"
keep_alive = 600
kernels = "exact"
temperature = 0
top_p = 0.9
`), 0o644))
	want := []ModelSpec{
		{Name: "coder", Path: "models/gocoder/target", Draft: "models/gocoder/drafter", Aliases: []string{"gocoder", "default"}},
		{Name: "demo", Path: "models/demo/target", KeepAlive: dur(10 * time.Minute), Kernels: "exact",
			Sampling: ports.SamplingDefaults{Temperature: fl(0), TopP: fl(0.9)}},
	}
	cfg, err := LoadConfig([]string{"--config", file}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, want, cfg.Models)
	assert.Equal(t, 2*time.Minute, cfg.KeepAlive)
	assert.Equal(t, 2*time.Minute, cfg.KeepAliveOf(cfg.Models[0]), "--keep-alive unless the model names its own")
	assert.Equal(t, 10*time.Minute, cfg.KeepAliveOf(cfg.Models[1]))
	mc := cfg.modelConfig(cfg.Models[1])
	assert.Equal(t, models.ModelConfig{Model: "models/demo/target", Backend: models.BackendCPU, Kernels: "exact",
		RankTimeout: models.DefaultRankTimeout}, mc)

	// The command line's --model replaces the file's models; so does the environment's.
	cfg, err = LoadConfig([]string{"--config", file, "--model", "only=models/demo/target"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []ModelSpec{{Name: "only", Path: "models/demo/target"}}, cfg.Models)
	cfg, err = LoadConfig([]string{"--config", file}, env(map[string]string{"HIGGS_MODEL": "models/demo/target"}), io.Discard)
	require.NoError(t, err)
	assert.Empty(t, cfg.Models)
	assert.Equal(t, "models/demo/target", cfg.Model)
}

func TestConfigModelTableErrors(t *testing.T) {
	for _, c := range []struct{ name, toml, want string }{
		{"not tables", `models = ["a"]`, "models[0]: want a table, not a string"},
		{"unknown key", "[[models]]\nname = \"a\"\npath = \"x\"\nsize = 3\n", `models[0]: unknown key "size"`},
		{"aliases not a list", "[[models]]\nname = \"a\"\npath = \"x\"\naliases = \"b\"\n", "aliases: want a list of strings"},
		{"alias in a table", "[[models]]\nname = \"a\"\npath = \"x\"\nalias = \"b\"\n", `alias: write aliases = ["…"] in a table`},
		{"bare model beside tables", "model = \"x\"\n[[models]]\nname = \"a\"\npath = \"y\"\n", `--model "x" is a bare path beside named models`},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "higgs.toml")
			require.NoError(t, os.WriteFile(file, []byte(c.toml), 0o644))
			_, err := LoadConfig([]string{"--config", file}, env(nil), io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestConfigModelSpecsKeepTodaysDefault(t *testing.T) {
	cfg := DefaultConfig()
	assert.Equal(t, []ModelSpec{{}}, cfg.ModelSpecs(), "no model: one unnamed model, the bundled default")
	assert.Equal(t, cfg.ModelConfig(), cfg.modelConfig(cfg.ModelSpecs()[0]), "loaded exactly as before")
	cfg.Model, cfg.Draft = "models/demo/target", "models/demo/drafter"
	assert.Equal(t, cfg.ModelConfig(), cfg.modelConfig(cfg.ModelSpecs()[0]))
}

// FuzzParseModelSpec: any --model value parses or is refused with an error, never a panic, and a parsed
// spec keeps what it was given.
func FuzzParseModelSpec(f *testing.F) {
	for _, s := range []string{"a=b", "coder=models/x,draft=y,alias=z,keep_alive=5m", "=", "a=b,,", "a=b,keep_alive=-99999999999",
		"a=b,alias=", "x=y,backend=mlx,kernels=fast"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var c Config
		if err := (modelFlag{&c}).Set(v); err != nil {
			return
		}
		if len(c.Models) == 1 {
			_ = c.validateModels()
		}
	})
}

// The TOML files docs/configuration.md shows are valid configurations, and its two-model file names two
// models, one with its drafter and one without.
func TestConfigurationPageTOML(t *testing.T) {
	blocks, err := readme.Blocks(filepath.Join("..", "docs", "configuration.md"))
	require.NoError(t, err)
	var files, several int
	for _, b := range blocks {
		if b.Lang != "toml" {
			continue
		}
		files++
		file := filepath.Join(t.TempDir(), "higgs.toml")
		require.NoError(t, os.WriteFile(file, []byte(b.Text), 0o644))
		cfg, err := LoadConfig([]string{"--config", file}, env(nil), io.Discard)
		require.NoError(t, err, "docs/configuration.md:%d", b.Line)
		if len(cfg.Models) == 2 {
			several++
			assert.NotEmpty(t, cfg.Models[0].Draft)
			assert.Empty(t, cfg.Models[1].Draft)
			_, routes, err := cfg.Routing()
			require.NoError(t, err)
			assert.Len(t, routes, 1, "and a route to a remote provider")
		}
	}
	assert.Equal(t, 2, files)
	assert.Equal(t, 1, several, "the page shows a configuration of two models")
}

// --keep-alive takes a duration or seconds, as a model's keep_alive and the docs do, from the command line,
// the environment and the file's top level alike.
func TestKeepAliveSeconds(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		want time.Duration
	}{
		{"flag duration", []string{"--keep-alive", "90s"}, nil, "", 90 * time.Second},
		{"flag seconds", []string{"--keep-alive", "300"}, nil, "", 5 * time.Minute},
		{"flag never", []string{"--keep-alive", "-1"}, nil, "", -time.Second},
		{"environment seconds", nil, map[string]string{"HIGGS_KEEP_ALIVE": "120"}, "", 2 * time.Minute},
		{"file seconds", nil, nil, "keep_alive = 600\n", 10 * time.Minute},
		{"default", nil, nil, "", DefaultKeepAlive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				file := filepath.Join(t.TempDir(), "higgs.toml")
				require.NoError(t, os.WriteFile(file, []byte(tc.file), 0o644))
				args = append(args, "--config", file)
			}
			cfg, err := LoadConfig(args, env(tc.env), io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.KeepAlive)
		})
	}
	_, err := LoadConfig([]string{"--keep-alive", "soon"}, env(nil), io.Discard)
	assert.ErrorContains(t, err, `keep_alive "soon": want a duration such as 5m or 1h, or seconds`)
}
