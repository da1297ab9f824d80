package verify

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

const goldenDir = "../../testdata/goldens"

// TestLogitsMatchTransformers: `higgs-verify logits` reproduces the transformers goldens (one fresh forward over
// the whole prompt, every position) within 1e-3 on every case, and its argmax agrees with the session's
// greedy tokens.
func TestLogitsMatchTransformers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(goldenDir, "index.json"))
	if os.IsNotExist(err) {
		t.Fatal("testdata/goldens is absent")
	}
	require.NoError(t, err)
	var idx struct {
		Cases []struct {
			Dir string `json:"dir"`
			OK  bool   `json:"ok"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &idx))
	for _, c := range idx.Cases {
		if !c.OK || c.Dir == "" {
			continue
		}
		t.Run(c.Dir, func(t *testing.T) {
			dir := filepath.Join(goldenDir, c.Dir)
			raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
			require.NoError(t, err)
			var g struct {
				Prompt []ports.Token `json:"prompt"`
				Logits struct {
					File  string `json:"file"`
					Shape []int  `json:"shape"`
				} `json:"logits"`
			}
			require.NoError(t, json.Unmarshal(raw, &g))
			b, err := os.ReadFile(filepath.Join(dir, g.Logits.File))
			require.NoError(t, err)
			T, V := g.Logits.Shape[0], g.Logits.Shape[1]
			require.Len(t, b, 4*T*V)
			m := load(t, dir, models.NoDraftName)
			res, err := Logits(t.Context(), m, g.Prompt)
			require.NoError(t, err)
			require.Len(t, res.Logits, T)
			var maxErr float64
			for i := range T {
				require.Len(t, res.Logits[i], V)
				for v := range V {
					want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*(i*V+v):]))
					maxErr = max(maxErr, math.Abs(float64(res.Logits[i][v]-want)))
				}
			}
			assert.LessOrEqual(t, maxErr, 1e-3, "max |Δlogit|")
			checkArgmaxAgainstGreedy(t, m, g.Prompt, res.Logits)
		})
	}
}

func checkArgmaxAgainstGreedy(t *testing.T, m *models.Models, prompt []ports.Token, logits [][]float32) {
	t.Helper()
	sess, err := m.Target.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer sess.Close()
	fr, err := sess.Forward(t.Context(), prompt, ports.ForwardOptions{})
	require.NoError(t, err)
	for i, row := range logits {
		b, _ := top2(row)
		assert.Equal(t, fr.Greedy[i], ports.Token(b), "position %d", i)
	}
}

func TestParityCPU(t *testing.T) {
	hybrid := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 21})
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 22, Taps: []int{0, 2}, Mask: 60, BlockSize: 8})
	a := load(t, hybrid, drafter)
	b, err := models.LoadModels(t.Context(), models.ModelConfig{Model: hybrid, Draft: drafter, Threads: 1}, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer b.Close()
	prompt := []ports.Token{3, 1, 4, 1, 5, 9, 2, 6}
	// Zero tolerances ask for bit-identical values: the same weights on 4 vs 1 worker threads must give them.
	exact := ParityOptions{Prompt: prompt, MaxTokens: 16}
	res, err := Parity(t.Context(), a, b, exact)
	require.NoError(t, err)
	assert.True(t, res.Pass)
	assert.Zero(t, res.MaxAbs, "same weights, different worker counts: bit-identical")
	assert.Zero(t, res.TapMaxAbs)
	assert.True(t, res.TapsCompared)
	assert.Equal(t, res.ArgmaxChecked, res.ArgmaxAgree)
	assert.True(t, res.ReplayA.Supported)
	assert.True(t, res.ReplayA.Recurrent)
	assert.Positive(t, res.ReplayA.Cases)
	assert.Zero(t, res.ReplayA.MaxAbs, "tape replay is bit-exact with recompute")
	assert.Equal(t, []int{0, 2}, res.TapLayers)

	other := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 23}), models.NoDraftName)
	res, err = Parity(t.Context(), a, other, parityOptions(prompt))
	require.ErrorIs(t, err, ErrCheckFailed)
	assert.False(t, res.Pass)
	assert.NotEmpty(t, res.Failures)

	dense := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 23}), models.NoDraftName)
	_, err = Parity(t.Context(), dense, dense, exact)
	require.NoError(t, err, "attention-only targets skip the replay check")

	for _, bad := range []func(*ParityOptions){
		func(o *ParityOptions) { o.MaxTokens = 0 },
		func(o *ParityOptions) { o.MaxAbs = -1 },
		func(o *ParityOptions) { o.TapAbs = math.NaN() },
		func(o *ParityOptions) { o.ReplayAbs = math.Inf(1) },
	} {
		o := parityOptions(prompt)
		bad(&o)
		_, err = Parity(t.Context(), dense, dense, o)
		require.ErrorIs(t, err, ErrBadInput)
	}
}

// TestParityCPUvsMLX runs the cross-backend parity check where libmlxc can be loaded (HIGGS_MLX_LIB).
func TestParityCPUvsMLX(t *testing.T) {
	if err := mlx.Available(); err != nil {
		t.Skipf("MLX backend unavailable: %v", err)
	}
	target := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 31})
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 32, Taps: []int{0, 2}, Mask: 60, BlockSize: 8})
	a := load(t, target, drafter)
	b, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Draft: drafter, Backend: models.BackendMLX}, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer b.Close()
	res, err := Parity(t.Context(), a, b, parityOptions([]ports.Token{3, 1, 4, 1, 5, 9, 2, 6}))
	require.NoError(t, err)
	assert.True(t, res.Pass)
	assert.True(t, res.DrafterChecked)
}

// parityOptions is DefaultParityOptions for prompt.
func parityOptions(prompt []ports.Token) ParityOptions {
	o := DefaultParityOptions()
	o.Prompt = prompt
	return o
}

// withRopeScaling returns a copy of the target dir whose config.json declares scaling (nil: none) and
// max_position_embeddings maxPos.
func withRopeScaling(t *testing.T, dir string, scaling map[string]any, maxPos int) string {
	t.Helper()
	return testmodel.Copy(t, dir, func(cfg map[string]any) {
		cfg["rope_scaling"] = scaling
		cfg["max_position_embeddings"] = maxPos
	})
}

// TestParityYaRNTarget: a YaRN target with factor 1 computes plain RoPE, a real factor changes the logits (so the
// scaling is applied), and where libmlxc is available the MLX backend agrees with the CPU reference on it.
func TestParityYaRNTarget(t *testing.T) {
	base := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 41})
	prompt := []ports.Token{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4}
	plain := load(t, withRopeScaling(t, base, nil, 512), models.NoDraftName)
	unit := load(t, withRopeScaling(t, base, map[string]any{"rope_type": "yarn", "factor": 1.0}, 512), models.NoDraftName)
	yarnDir := withRopeScaling(t, base, map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, 512)
	yarn := load(t, yarnDir, models.NoDraftName)

	o := parityOptions(prompt)
	o.MaxAbs, o.TapAbs = 1e-5, 1e-5
	res, err := Parity(t.Context(), plain, unit, o)
	require.NoError(t, err, "YaRN with factor 1 is plain RoPE: %v", res.Failures)

	res, err = Parity(t.Context(), plain, yarn, parityOptions(prompt))
	require.ErrorIs(t, err, ErrCheckFailed, "YaRN (factor 4 over a 16-position original context) must change the logits")
	assert.Greater(t, res.MaxAbs, 1e-3)

	if err := mlx.Available(); err != nil {
		t.Logf("MLX half skipped: %v", err)
		return
	}
	mx, err := models.LoadModels(t.Context(), models.ModelConfig{Model: yarnDir, Draft: models.NoDraftName, Backend: models.BackendMLX}, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer mx.Close()
	res, err = Parity(t.Context(), yarn, mx, parityOptions(prompt))
	require.NoError(t, err, "%v", res.Failures)
	assert.True(t, res.Pass)
}

func TestAbsDiff(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, tc := range []struct {
		a, b float64
		d    float64
		ok   bool
	}{
		{1, 1, 0, true}, {1, 3, 2, true}, {-inf, -inf, 0, true}, {inf, inf, 0, true},
		{inf, 1, 0, false}, {1, -inf, 0, false}, {nan, 1, 0, false}, {nan, nan, 0, false}, {inf, -inf, 0, false},
	} {
		d, ok := absDiff(tc.a, tc.b)
		assert.Equal(t, tc.ok, ok, "%v %v", tc.a, tc.b)
		assert.Equal(t, tc.d, d, "%v %v", tc.a, tc.b)
	}
}
