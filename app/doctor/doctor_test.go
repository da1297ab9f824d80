package doctor

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/models"
)

var (
	demoTarget  = filepath.Join("..", "..", "models", "demo", "target")
	demoDrafter = filepath.Join("..", "..", "models", "demo", "drafter")
	gocoder     = filepath.Join("..", "..", "models", "gocoder", "target")
)

// linkModel makes a model directory of links to dir's files, leaving out skip, and rewriting config.json
// with edit when set.
func linkModel(t *testing.T, dir string, skip string, edit func(map[string]any)) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == skip {
			continue
		}
		src, err := filepath.Abs(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		if e.Name() == "config.json" && edit != nil {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(b, &cfg))
			edit(cfg)
			b, err = json.Marshal(cfg)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(out, e.Name()), b, 0o644))
			continue
		}
		require.NoError(t, os.Symlink(src, filepath.Join(out, e.Name())))
	}
	return out
}

func statuses(checks []Check) map[string]Status {
	m := map[string]Status{}
	for _, c := range checks {
		m[c.Name] = c.Status
	}
	return m
}

func TestDoctor(t *testing.T) {
	if _, err := os.Stat(filepath.Join(demoTarget, "config.json")); err != nil {
		t.Fatalf("the bundled demo model is absent: %v", err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = busy.Close() })
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	good := []string{"--port", "0", "--model", demoTarget, "--draft", demoDrafter}
	noWeights := linkModel(t, demoTarget, "model.safetensors", nil)
	noTokenizer := linkModel(t, demoTarget, "tokenizer.json", nil)
	noConfig := linkModel(t, demoTarget, "config.json", nil)
	badVocab := linkModel(t, demoDrafter, "", func(c map[string]any) { c["vocab_size"] = 4000 })
	const gib = 1 << 30
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		machine int64
		want    map[string]Status
		detail  map[string]string // a check's line must contain this
	}{
		{name: "good setup", args: good, machine: 16 * gib,
			want: map[string]Status{"config": OK, "listen": OK, "backend": OK, "model": OK, "tokenizer": OK, "drafter": OK,
				"block size": OK, "memory": OK, "budget": OK},
			detail: map[string]string{"drafter": "DFlash", "model": "demo at"}},
		{name: "no drafter", args: []string{"--port", "0", "--model", demoTarget}, machine: 16 * gib,
			want: map[string]Status{"drafter": OK, "block size": OK}, detail: map[string]string{"drafter": "none"}},
		{name: "invalid configuration", args: []string{"--port", "0", "--block-size", "-3"},
			want: map[string]Status{"config": Fail}, detail: map[string]string{"config": "--block-size -3"}},
		{name: "missing model", args: []string{"--port", "0", "--model", filepath.Join(t.TempDir(), "nope")},
			want: map[string]Status{"model": Fail}, detail: map[string]string{"model": "model not found"}},
		{name: "missing config.json", args: []string{"--port", "0", "--model", noConfig},
			want: map[string]Status{"model": Fail}, detail: map[string]string{"model": "config.json"}},
		{name: "missing weights", args: []string{"--port", "0", "--model", noWeights},
			want: map[string]Status{"model": Fail}, detail: map[string]string{"model": "no safetensors weights"}},
		{name: "missing tokenizer", args: []string{"--port", "0", "--model", noTokenizer}, machine: 16 * gib,
			want: map[string]Status{"model": OK, "tokenizer": Fail}, detail: map[string]string{"tokenizer": "no tokenizer.json"}},
		{name: "drafter of another target", args: []string{"--port", "0", "--model", gocoder, "--draft", demoDrafter}, machine: 16 * gib,
			want: map[string]Status{"model": OK, "drafter": Fail}, detail: map[string]string{"drafter": "hidden_size 256 differs from the target's 640"}},
		{name: "drafter of another vocabulary", args: []string{"--port", "0", "--model", demoTarget, "--draft", badVocab}, machine: 16 * gib,
			want: map[string]Status{"drafter": Fail}, detail: map[string]string{"drafter": "vocab_size 4000 differs from the target's 4096"}},
		{name: "missing drafter", args: []string{"--port", "0", "--model", demoTarget, "--draft", filepath.Join(t.TempDir(), "nope")}, machine: 16 * gib,
			want: map[string]Status{"drafter": Fail}, detail: map[string]string{"drafter": "model not found"}},
		{name: "block size beyond the drafter's own is fine", args: append(append([]string{}, good...), "--block-size", "17"), machine: 16 * gib,
			want: map[string]Status{"drafter": OK, "block size": OK}, detail: map[string]string{"block size": "17"}},
		{name: "block size beyond the context", args: append(append([]string{}, good...), "--block-size", "10000000"), machine: 16 * gib,
			want: map[string]Status{"drafter": OK, "block size": Fail}, detail: map[string]string{"block size": "exceeds this model's context length"}},
		{name: "block size without a drafter", args: []string{"--port", "0", "--model", demoTarget, "--block-size", "4"}, machine: 16 * gib,
			want: map[string]Status{"block size": Fail}, detail: map[string]string{"block size": "needs a drafter"}},
		{name: "budget too small", args: append(append([]string{}, good...), "--memory-budget-bytes", "64KiB"), machine: 16 * gib,
			want: map[string]Status{"memory": OK, "budget": Fail}, detail: map[string]string{"budget": "cannot hold even a one-token request"}},
		{name: "budget short of a default request", args: append(append([]string{}, good...), "--memory-budget-bytes", "4MiB"), machine: 16 * gib,
			want: map[string]Status{"budget": Warn}, detail: map[string]string{"budget": "cannot hold a request of 1024 output tokens"}},
		{name: "budget beyond the machine", args: append(append([]string{}, good...), "--memory-budget-bytes", "2GiB"), machine: gib,
			want: map[string]Status{"memory": OK, "budget": Warn}, detail: map[string]string{"budget": "the system may swap"}},
		{name: "weights beyond the machine", args: good, machine: 1 << 20,
			want: map[string]Status{"memory": Fail}, detail: map[string]string{"memory": "exceed this machine's memory"}},
		{name: "unknown machine memory", args: good, machine: 0,
			want: map[string]Status{"memory": Warn}},
		{name: "port busy", args: []string{"--port", busyPort, "--model", demoTarget}, machine: 16 * gib,
			want: map[string]Status{"listen": Fail}, detail: map[string]string{"listen": "cannot listen on 127.0.0.1:" + busyPort}},
		{name: "exposed without a key", args: []string{"--port", "0", "--host", "0.0.0.0", "--model", demoTarget}, machine: 16 * gib,
			want: map[string]Status{"config": Warn}, detail: map[string]string{"config": "without a key"}},
		{name: "prefix cache directory", args: append(append([]string{}, good...), "--prefix-cache-dir", t.TempDir()), machine: 16 * gib,
			want: map[string]Status{"prefix cache": OK}, detail: map[string]string{"prefix cache": "is writable"}},
		{name: "prefix cache directory to create", args: append(append([]string{}, good...), "--prefix-cache-dir", filepath.Join(t.TempDir(), "new")), machine: 16 * gib,
			want: map[string]Status{"prefix cache": OK}, detail: map[string]string{"prefix cache": "will be created"}},
		{name: "prefix cache directory unreachable", args: append(append([]string{}, good...), "--prefix-cache-dir", filepath.Join(t.TempDir(), "a", "b")), machine: 16 * gib,
			want: map[string]Status{"prefix cache": Fail}, detail: map[string]string{"prefix cache": "nor does its parent"}},
		{name: "prefix cache directory is a file", args: append(append([]string{}, good...), "--prefix-cache-dir", demoTarget+"/config.json"), machine: 16 * gib,
			want: map[string]Status{"prefix cache": Fail}, detail: map[string]string{"prefix cache": "is not a directory"}},
		{name: "from the environment", args: []string{"--port", "0"}, env: map[string]string{"HIGGS_MODEL": demoTarget, "HIGGS_NO_DRAFT": "true"}, machine: 16 * gib,
			want: map[string]Status{"model": OK, "drafter": OK}, detail: map[string]string{"model": "demo at"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := Env{Getenv: func(k string) string { return tc.env[k] }, MachineMemory: func() int64 { return tc.machine }}
			checks, err := Run(tc.args, env, &bytes.Buffer{})
			require.NoError(t, err)
			got := statuses(checks)
			for name, want := range tc.want {
				assert.Equal(t, want, got[name], "%s: %+v", name, checks)
			}
			var out bytes.Buffer
			require.NoError(t, Write(&out, checks))
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			assert.Len(t, lines, len(checks), "one line per check")
			for name, sub := range tc.detail {
				found := false
				for _, l := range lines {
					if strings.Contains(l, " "+name+" ") && strings.Contains(l, sub) {
						found = true
					}
				}
				assert.True(t, found, "no %q line containing %q in:\n%s", name, sub, out.String())
			}
			for _, l := range lines {
				if strings.HasPrefix(l, string(Fail)) || strings.HasPrefix(l, string(Warn)) {
					assert.Contains(t, l, " — fix: ", "a problem says what to do")
				}
			}
			code := Main(tc.args, env, &bytes.Buffer{}, &bytes.Buffer{})
			assert.Equal(t, map[bool]int{false: 0, true: 1}[Failed(checks)], code)
		})
	}
}

// The MLX backend asked for where libmlxc cannot be found fails with the reason and a fix.
func TestDoctorMLXUnavailable(t *testing.T) {
	t.Setenv("HIGGS_MLX_LIB", filepath.Join(t.TempDir(), "libmlxc.so"))
	checks, err := Run([]string{"--port", "0", "--backend", "mlx", "--model", demoTarget}, Env{Getenv: func(string) string { return "" },
		MachineMemory: func() int64 { return 1 << 34 }}, &bytes.Buffer{})
	require.NoError(t, err)
	got := statuses(checks)
	assert.Equal(t, Fail, got["backend"], "%+v", checks)
	for _, c := range checks {
		if c.Name == "backend" {
			assert.Contains(t, c.Detail, "MLX backend not available")
			assert.Contains(t, c.Fix, "HIGGS_MLX_LIB")
		}
	}
}

func TestDoctorHelp(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 0, Main([]string{"-h"}, Env{Getenv: func(string) string { return "" }}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "-memory-budget-bytes")
}

func TestHuman(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB"} {
		assert.Equal(t, want, human(n), "%d", n)
	}
}

// With several models each is checked as the one model it would be, its lines named after it.
func TestDoctorSeveralModels(t *testing.T) {
	env := Env{Getenv: func(string) string { return "" }, MachineMemory: func() int64 { return 16 << 30 }}
	checks, err := Run([]string{"--port", "0", "--model", "demo=" + demoTarget + ",draft=" + demoDrafter,
		"--model", "plain=" + gocoder, "--model", "gone=" + filepath.Join(t.TempDir(), "nope")}, env, &bytes.Buffer{})
	require.NoError(t, err)
	lines := map[string]Status{}
	for _, c := range checks {
		name, _, _ := strings.Cut(c.Detail, ": ")
		if c.Name == "config" || c.Name == "listen" {
			name = ""
		}
		lines[c.Name+"/"+name] = c.Status
	}
	assert.Equal(t, OK, lines["drafter/demo"], "%+v", checks)
	assert.Equal(t, OK, lines["model/plain"], "%+v", checks)
	assert.Equal(t, Fail, lines["model/gone"], "%+v", checks)
	for _, c := range checks {
		if c.Name == "drafter" && strings.HasPrefix(c.Detail, "plain: ") {
			assert.Contains(t, c.Detail, "none: plain decoding", "a named model without draft= has no drafter")
		}
	}
	assert.True(t, Failed(checks))
}

// The backend check explains a CPU with AMX whose fast kernels run no tiles, and says nothing otherwise.
func TestAMXNote(t *testing.T) {
	amx := models.CPUFeatures{AVX512VNNI: true, AMXTile: true, AMXInt8: true}
	for _, c := range []struct {
		name, kernels, form string
		f                   models.CPUFeatures
		note                bool
	}{
		{"tiles in use", models.KernelsFast, "avx512vnni+amx", amx, false},
		{"tile state refused", models.KernelsFast, "avx512vnni", amx, true},
		{"no AMX", models.KernelsFast, "avx512vnni", models.CPUFeatures{AVX512VNNI: true}, false},
		{"exact kernels", models.KernelsExact, "avx512vnni", amx, false},
	} {
		got := amxNote(c.f, c.kernels, c.form)
		if c.note {
			assert.Contains(t, got, "AMX is present but unused", c.name)
		} else {
			assert.Empty(t, got, c.name)
		}
	}
}
