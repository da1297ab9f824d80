package modeltools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/adapters/gguf"
	"github.com/higgs-go/higgs/app/verify"
)

// ExportGGUFOptions describe one `higgs-verify export-gguf` run.
type ExportGGUFOptions struct {
	Model      string // a dense Qwen3 checkpoint directory
	Out        string // the .gguf file to write
	Type       string // f32, f16, bf16, q8_0 or q4_0
	Requantize bool   // allow lossy conversions
}

// ExportGGUFResult is what `export-gguf --json` prints.
type ExportGGUFResult struct {
	gguf.ExportResult
	Out   string `json:"out"`
	Bytes int64  `json:"bytes"`
}

// ExportGGUF writes o.Model as a GGUF file llama.cpp loads (architecture qwen3), so both engines can be
// measured on the same weights. It writes to a temporary file beside o.Out and renames it, so a refused or
// failed export leaves no partial file. A weight the chosen type cannot hold exactly is an error wrapping
// verify.ErrBadInput and gguf.ErrInexact, unless o.Requantize.
func ExportGGUF(ctx context.Context, o ExportGGUFOptions) (ExportGGUFResult, error) {
	var errs []error
	if o.Model == "" {
		errs = append(errs, errors.New("--model is required"))
	}
	if o.Out == "" {
		errs = append(errs, errors.New("--out is required"))
	}
	typ, err := gguf.ParseType(o.Type)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return ExportGGUFResult{}, fmt.Errorf("%w: export-gguf: %w", verify.ErrBadInput, err)
	}
	if err := ctx.Err(); err != nil {
		return ExportGGUFResult{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(o.Out), ".export-*.gguf")
	if err != nil {
		return ExportGGUFResult{}, fmt.Errorf("export-gguf: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return ExportGGUFResult{}, fmt.Errorf("export-gguf: %w", err)
	}
	res, err := gguf.ExportQwen3(o.Model, tmp, gguf.ExportOptions{Type: typ, Requantize: o.Requantize})
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, gguf.ErrInexact) || errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%w: %w", verify.ErrBadInput, err)
		}
		return ExportGGUFResult{}, fmt.Errorf("export-gguf %s: %w", o.Model, err)
	}
	if err := os.Rename(tmp.Name(), o.Out); err != nil {
		return ExportGGUFResult{}, fmt.Errorf("export-gguf: %w", err)
	}
	fi, err := os.Stat(o.Out)
	if err != nil {
		return ExportGGUFResult{}, fmt.Errorf("export-gguf: %w", err)
	}
	return ExportGGUFResult{ExportResult: res, Out: o.Out, Bytes: fi.Size()}, nil
}
