package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/app/modeltools"
)

// synthCmd writes a random hybrid target and a DFlash drafter for it (modeltools.Synth), for bench.
func (c *cli) synthCmd() *cobra.Command {
	var f struct {
		out                     string
		wide, layers, vocab     int
		bits, group             int
		f32, f16, json, dflash2 bool
		dense, symmetric        bool
		tokenizer               string
		seed                    uint64
	}
	cmd := &cobra.Command{
		Use:   "synth",
		Short: "Write a random hybrid (or --dense) target and DFlash drafter (for bench on a model of a chosen size)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := modeltools.SynthOptions{Out: f.out, Wide: f.wide, Layers: f.layers, Vocab: f.vocab, F32: f.f32, F16: f.f16, Seed: f.seed, DFlash2: f.dflash2,
				Dense: f.dense, Symmetric: f.symmetric, Tokenizer: f.tokenizer}
			if f.bits != 0 {
				o.Quant = &quant.Spec{Bits: f.bits, GroupSize: f.group}
			}
			res, err := modeltools.Synth(cmd.Context(), o)
			if err != nil {
				return err
			}
			return c.emit(f.json, res, func(w io.Writer) {
				fmt.Fprintf(w, "target %s: %s, %d params, %d layers, hidden %d, vocab %d, %s\ndrafter %s\n",
					res.Target, res.Family, res.Params, res.Layers, res.Hidden, res.Vocab, res.DType, res.Drafter)
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
	fs.BoolVar(&f.f16, "f16", false, "store float weights as IEEE half precision (F16) instead of BF16")
	fs.BoolVar(&f.json, "json", false, "print exactly one JSON object on stdout")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed")
	fs.BoolVar(&f.dense, "dense", false, "write a dense Qwen3 target (every layer full attention; the architecture export-gguf and llama.cpp take)")
	fs.BoolVar(&f.symmetric, "symmetric", false, "make the weights exact in GGUF's formats: symmetric quantization (bias = -2^(bits-1)*scale, f16-exact scales; 4 or 8 bits) and float weights exact in f16")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "copy this directory's tokenizer.json (and tokenizer_config.json) into the target")
	fs.BoolVar(&f.dflash2, "dflash2", false, "write a DFlash2 drafter (dynamic convolutions, candidate selector) instead of a DFlash one")
	return cmd
}
