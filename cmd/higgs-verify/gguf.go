package main

import (
	"fmt"
	"io"

	"github.com/higgs-go/higgs/app/modeltools"
	"github.com/spf13/cobra"
)

// exportGGUFCmd writes a dense Qwen3 checkpoint as GGUF (modeltools.ExportGGUF), for a side-by-side with llama.cpp.
func (c *cli) exportGGUFCmd() *cobra.Command {
	var o modeltools.ExportGGUFOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "export-gguf",
		Short: "Write a dense Qwen3 checkpoint as a GGUF file for llama.cpp (exactly, or refuse unless --requantize)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := modeltools.ExportGGUF(cmd.Context(), o)
			if err != nil {
				return err
			}
			return c.emit(asJSON, res, func(w io.Writer) {
				exact := "exact"
				if !res.Exact {
					exact = fmt.Sprintf("%d matrices rounded", res.Rounded)
				}
				fmt.Fprintf(w, "%s: %s %s, %d tensors, %d layers, vocab %d, %d bytes (%s)\n",
					res.Out, res.Architecture, res.Type, res.Tensors, res.Layers, res.Vocab, res.Bytes, exact)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Model, "model", "", "dense Qwen3 checkpoint directory (config.json, safetensors, tokenizer.json)")
	fs.StringVar(&o.Out, "out", "", "GGUF file to write")
	fs.StringVar(&o.Type, "type", "q8_0", "matrix encoding: f32, f16, bf16, q8_0 or q4_0 (norms stay f32)")
	fs.BoolVar(&o.Requantize, "requantize", false, "allow lossy conversion (rounding to f16/bf16, requantizing to q8_0/q4_0) instead of refusing")
	fs.BoolVar(&asJSON, "json", false, "print exactly one JSON object on stdout")
	return cmd
}
