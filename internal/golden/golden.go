// Package golden reads the transformers goldens under testdata/goldens (tiny checkpoints plus the logits,
// hidden states and greedy continuations transformers computes on them, written by
// tools/goldens/make_goldens.py; testdata/goldens/README.md documents the files) for the backends' tests, so
// each test package does not re-declare the index and case schema and the float32 file reader. It is
// imported only by tests.
package golden

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// Dir returns testdata/goldens, found from this file's place in the module so tests at any depth agree.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "goldens")
}

// Array names a raw little-endian float32 file (row-major) in a case directory and its shape.
type Array struct {
	File  string `json:"file"`
	Shape []int  `json:"shape"`
}

// Case is a target golden's golden.json (the fields the tests read).
type Case struct {
	Prompt       []ports.Token `json:"prompt"`
	Logits       Array         `json:"logits"`        // [T, V]: one fresh forward over the prompt
	HiddenStates Array         `json:"hidden_states"` // [L+1, T, H]: the embedding, then every layer's output
	Greedy       struct {
		Tokens     []ports.Token `json:"tokens"`
		Top2Margin []float64     `json:"top2_margin"`
	} `json:"greedy"`
	PromptArgmax     []ports.Token `json:"prompt_argmax"`
	PromptTop2Margin []float64     `json:"prompt_top2_margin"`
	// DequantSamples (MLX cases) are modules' float32 weights dequantized by the reference, to compare bit
	// for bit.
	DequantSamples []struct {
		Module string `json:"module"`
		Array
		Bits      int `json:"bits"`
		GroupSize int `json:"group_size"`
	} `json:"dequant_samples"`
}

// Target is one target golden: its case name, directory and golden.json.
type Target struct {
	Name, Dir string
	Case      Case
}

// Targets returns the target goldens index.json marks ok, in its order. It skips t when the goldens have not
// been generated.
func Targets(t testing.TB) []Target {
	t.Helper()
	root := Dir()
	raw, err := os.ReadFile(filepath.Join(root, "index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no goldens under %s yet (tools/goldens/make_goldens.py writes them)", root)
	}
	require.NoError(t, err)
	var idx struct {
		Cases []struct {
			Case string `json:"case"`
			Dir  string `json:"dir"`
			OK   bool   `json:"ok"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &idx))
	require.NotEmpty(t, idx.Cases, "index.json lists no cases")
	var out []Target
	for _, c := range idx.Cases {
		if !c.OK {
			continue
		}
		dir := filepath.Join(root, c.Dir)
		g, err := os.ReadFile(filepath.Join(dir, "golden.json"))
		require.NoError(t, err)
		tg := Target{Name: c.Case, Dir: dir}
		require.NoError(t, json.Unmarshal(g, &tg.Case), "%s/golden.json", c.Dir)
		out = append(out, tg)
	}
	return out
}

// Floats reads array a of the case in dir, checking its size against its shape.
func Floats(t testing.TB, dir string, a Array) []float32 {
	t.Helper()
	path := filepath.Join(dir, a.File)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	require.Equal(t, 4*n, len(raw), "%s: %d bytes for shape %v", path, len(raw), a.Shape)
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}
