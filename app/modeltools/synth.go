package modeltools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/verify"
)

// SynthOptions describe a synthetic random hybrid target (qwen3_next layout) and a DFlash drafter for it.
type SynthOptions struct {
	Out    string // directory that receives target/ and drafter/
	Wide   int    // width multiplier of the test architecture (16: hidden 1024, MLP 3072)
	Layers int    // target layers (every second one full attention)
	Vocab  int
	// Quant, when non-nil, stores every Linear MLX-affine quantized.
	Quant *quant.Spec
	F32   bool // float weights as F32 instead of BF16
	F16   bool // float weights as IEEE half precision instead of BF16
	Seed  uint64
	// DFlash2 writes a DFlash2 drafter instead of a DFlash one.
	DFlash2 bool
	// Dense writes a dense Qwen3 target (every layer full attention) instead of a hybrid one: the
	// architecture llama.cpp also runs, for export-gguf.
	Dense bool
	// Symmetric makes the weights exactly representable as GGUF Q8_0/Q4_0 (4 or 8 bits) or F16 (floats):
	// see synth.TargetSpec.Symmetric.
	Symmetric bool
	// Tokenizer, when set, is a directory whose tokenizer.json (and tokenizer_config.json, if any) the
	// target gets a copy of; Vocab must cover its ids.
	Tokenizer string
}

// SynthResult is what `higgs-verify synth --json` prints.
type SynthResult struct {
	Target  string `json:"target"`
	Drafter string `json:"drafter"`
	// Params counts the target's weights (embedding and LM head included).
	Params int64  `json:"params"`
	Layers int    `json:"layers"`
	Hidden int    `json:"hidden"`
	Vocab  int    `json:"vocab"`
	DType  string `json:"dtype"`
	// Family is the target's model_type (qwen3_next, or qwen3 with Dense); Symmetric as asked.
	Family    string `json:"family"`
	Symmetric bool   `json:"symmetric"`
}

// Synth writes a random hybrid target and a DFlash drafter for it, so bench can measure costs on a model of a
// realistic size without downloads, and checks that both load. The weights are random: drafts are almost
// never accepted, which is the regime where the adaptive policy must not lose.
func Synth(ctx context.Context, o SynthOptions) (SynthResult, error) {
	var errs []error
	if o.Out == "" {
		errs = append(errs, errors.New("an output directory is required"))
	}
	if o.Wide < 1 || o.Layers < 2 || o.Vocab < 64 {
		errs = append(errs, fmt.Errorf("wide %d, layers %d, vocab %d: want ≥ 1, ≥ 2, ≥ 64", o.Wide, o.Layers, o.Vocab))
	}
	if o.Quant != nil {
		if err := o.Quant.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Symmetric && o.Quant != nil && o.Quant.Bits != 4 && o.Quant.Bits != 8 {
		errs = append(errs, fmt.Errorf("--symmetric needs 4 or 8 bits (GGUF Q4_0/Q8_0), not %d", o.Quant.Bits))
	}
	if o.F32 && o.F16 {
		errs = append(errs, errors.New("--f32 and --f16 exclude each other"))
	}
	if err := errors.Join(errs...); err != nil {
		return SynthResult{}, fmt.Errorf("%w: synth: %w", verify.ErrBadInput, err)
	}
	tdir, ddir := filepath.Join(o.Out, "target"), filepath.Join(o.Out, "drafter")
	for _, d := range []string{tdir, ddir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return SynthResult{}, fmt.Errorf("synth: %w", err)
		}
	}
	family := "qwen3_next"
	if o.Dense {
		family = "qwen3"
	}
	ts := synth.TargetSpec{Family: family, Seed: o.Seed, Layers: o.Layers, Vocab: o.Vocab,
		Context: 4096, Wide: o.Wide, BF16: !o.F32, F16: o.F16, Quant: o.Quant, Symmetric: o.Symmetric}
	if err := synth.WriteTarget(tdir, ts); err != nil {
		return SynthResult{}, fmt.Errorf("synth target: %w", err)
	}
	if o.Tokenizer != "" {
		if err := copyTokenizer(o.Tokenizer, tdir, o.Vocab); err != nil {
			return SynthResult{}, fmt.Errorf("synth: %w", err)
		}
	}
	// Four taps spread over the depth, as published drafters use.
	taps := make([]int, 0, 4)
	for i := range 4 {
		if t := 1 + i*(o.Layers-2)/3; len(taps) == 0 || t > taps[len(taps)-1] {
			taps = append(taps, t)
		}
	}
	ds := synth.DrafterSpec{Seed: o.Seed + 1, Taps: taps, Mask: int32(o.Vocab - 1), Vocab: o.Vocab,
		Wide: o.Wide, BF16: !o.F32, F16: o.F16, Quant: o.Quant, NumTargetLayers: o.Layers, DFlash2: o.DFlash2}
	if err := synth.WriteDrafter(ddir, ds); err != nil {
		return SynthResult{}, fmt.Errorf("synth drafter: %w", err)
	}
	params, err := countParams(tdir, o.Quant)
	if err != nil {
		return SynthResult{}, fmt.Errorf("synth: %w", err)
	}
	m, err := models.LoadModels(ctx, models.ModelConfig{Model: tdir, Draft: ddir, Backend: models.BackendCPU}, zerolog.Nop(), nil)
	if err != nil {
		return SynthResult{}, fmt.Errorf("synth: the written models do not load: %w", err)
	}
	info := m.Target.Info()
	_ = m.Close()
	res := SynthResult{Target: tdir, Drafter: ddir, Params: params, Layers: o.Layers,
		Hidden: info.HiddenSize, Vocab: info.VocabSize, DType: "bf16", Family: family, Symmetric: o.Symmetric}
	switch {
	case o.Quant != nil:
		res.DType = fmt.Sprintf("q%d/g%d", o.Quant.Bits, o.Quant.GroupSize)
	case o.F32:
		res.DType = "f32"
	case o.F16:
		res.DType = "f16"
	}
	return res, nil
}

// countParams counts the logical weights in dir's safetensors: packed quantized matrices count their
// unpacked elements (32/bits codes per uint32 word), and their scales and biases are not weights.
func countParams(dir string, q *quant.Spec) (int64, error) {
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var n int64
	for _, name := range st.Names() {
		t, err := st.Tensor(name)
		if err != nil {
			return 0, err
		}
		switch {
		case q != nil && t.DType == safetensors.U32:
			n += int64(t.NumElements()) * 32 / int64(q.Bits)
		case q != nil && (strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases")):
		default:
			n += int64(t.NumElements())
		}
	}
	return n, nil
}
