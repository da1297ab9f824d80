package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/higgs-go/higgs/adapters/cpu/dflash/dflashtest"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/app"
)

// synthResult is what `higgs-verify synth --json` prints.
type synthResult struct {
	Target  string `json:"target"`
	Drafter string `json:"drafter"`
	// Params counts the target's weights (embedding and LM head included).
	Params int64  `json:"params"`
	Layers int    `json:"layers"`
	Hidden int    `json:"hidden"`
	Vocab  int    `json:"vocab"`
	DType  string `json:"dtype"`
}

// synthCmd writes a random hybrid target (Gated DeltaNet + attention, qwen3_next layout) and a DFlash drafter
// for it, so `bench` can measure costs on a model of a realistic size without downloads. The weights are
// random: drafts are almost never accepted, which is the regime where the adaptive policy must not lose.
func (c *cli) synthCmd() *cobra.Command {
	var f struct {
		out                 string
		wide, layers, vocab int
		bits, group         int
		f32, json           bool
		seed                uint64
	}
	cmd := &cobra.Command{
		Use:   "synth",
		Short: "Write a random hybrid target and DFlash drafter (for bench on a model of a chosen size)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []error
			if f.out == "" {
				errs = append(errs, errors.New("--out is required"))
			}
			if f.wide < 1 || f.layers < 2 || f.vocab < 64 {
				errs = append(errs, fmt.Errorf("--wide %d, --layers %d, --vocab %d: want ≥ 1, ≥ 2, ≥ 64", f.wide, f.layers, f.vocab))
			}
			var q *quant.Spec
			if f.bits != 0 {
				q = &quant.Spec{Bits: f.bits, GroupSize: f.group}
				if err := q.Validate(); err != nil {
					errs = append(errs, err)
				}
			}
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("%w: synth: %w", app.ErrBadInput, err)
			}
			tdir, ddir := filepath.Join(f.out, "target"), filepath.Join(f.out, "drafter")
			for _, d := range []string{tdir, ddir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("synth: %w", err)
				}
			}
			ts := dflashtest.TargetSpec{Family: "qwen3_next", Seed: f.seed, Layers: f.layers, Vocab: f.vocab,
				Context: 4096, Wide: f.wide, BF16: !f.f32, Quant: q}
			if err := dflashtest.WriteTarget(tdir, ts); err != nil {
				return fmt.Errorf("synth target: %w", err)
			}
			// Four taps spread over the depth, as published drafters use.
			taps := make([]int, 0, 4)
			for i := range 4 {
				if t := 1 + i*(f.layers-2)/3; len(taps) == 0 || t > taps[len(taps)-1] {
					taps = append(taps, t)
				}
			}
			ds := dflashtest.DrafterSpec{Seed: f.seed + 1, Taps: taps, Mask: int32(f.vocab - 1), Vocab: f.vocab,
				Wide: f.wide, BF16: !f.f32, Quant: q, NumTargetLayers: f.layers}
			if err := dflashtest.WriteDrafter(ddir, ds); err != nil {
				return fmt.Errorf("synth drafter: %w", err)
			}
			params, err := countParams(tdir, q)
			if err != nil {
				return fmt.Errorf("synth: %w", err)
			}
			m, cleanup, err := c.loadModels(cmd.Context(), app.ModelConfig{Model: tdir, Draft: ddir, Backend: "cpu"})
			if err != nil {
				return fmt.Errorf("synth: the written models do not load: %w", err)
			}
			info := m.Target.Info()
			cleanup()
			res := synthResult{Target: tdir, Drafter: ddir, Params: params, Layers: f.layers,
				Hidden: info.HiddenSize, Vocab: info.VocabSize, DType: "bf16"}
			switch {
			case q != nil:
				res.DType = fmt.Sprintf("q%d/g%d", q.Bits, q.GroupSize)
			case f.f32:
				res.DType = "f32"
			}
			return c.emit(f.json, res, func(w io.Writer) {
				fmt.Fprintf(w, "target %s: %d params, %d layers, hidden %d, vocab %d, %s\ndrafter %s\n",
					res.Target, res.Params, res.Layers, res.Hidden, res.Vocab, res.DType, res.Drafter)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.out, "out", "", "directory to write target/ and drafter/ into")
	fs.IntVar(&f.wide, "wide", 16, "width multiplier of the test architecture (16: hidden 1024, MLP 3072)")
	fs.IntVar(&f.layers, "layers", 20, "target layers (every second one full attention)")
	fs.IntVar(&f.vocab, "vocab", 16384, "vocabulary size")
	fs.IntVar(&f.bits, "bits", 0, "MLX affine quantization bits of every Linear (0: none)")
	fs.IntVar(&f.group, "group-size", 64, "quantization group size")
	fs.BoolVar(&f.f32, "f32", false, "store float weights as F32 instead of BF16")
	fs.BoolVar(&f.json, "json", false, "print exactly one JSON object on stdout")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed")
	return cmd
}

// countParams counts the logical weights in dir's safetensors: packed quantized matrices count their
// unpacked elements, and their scales and biases are not weights.
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
			n += int64(t.NumElements()) * int64(32/q.Bits)
		case q != nil && (strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases")):
		default:
			n += int64(t.NumElements())
		}
	}
	return n, nil
}
