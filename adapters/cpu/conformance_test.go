package cpu

import (
	"errors"
	"testing"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The ports conformance suite on dense, hybrid and quantized hybrid MoE targets.
func TestPortConformance(t *testing.T) {
	for name, f := range map[string]fixture{
		"qwen3":             {Family: "qwen3", Seed: 81, Layers: 2, Tied: true},
		"qwen3_5 hybrid":    {Family: "qwen3_5", Seed: 82, Layers: 4, Gate: true, Partial: 0.25},
		"qwen3_next moe q4": {Family: "qwen3_next", Seed: 83, Layers: 4, MoE: true, Experts: "switch", MLXLayout: true, QuantBits: 4, QuantGS: 32},
	} {
		t.Run(name, func(t *testing.T) {
			f.Context = 40
			tg := loadFixture(t, f, 2)
			porttest.SessionSuite{
				Open: func(t *testing.T, taps []int) ports.Session {
					s, err := tg.NewSession(t.Context(), taps)
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
				Vocab:     fxV,
				TapLayers: []int{f.Layers - 1, 0},
				ReadTaps: func(tp ports.Taps) ([][]float32, error) {
					c, ok := tp.(*Taps)
					if !ok {
						return nil, errors.New("not cpu taps")
					}
					data, rows, width, err := c.Host()
					if err != nil {
						return nil, err
					}
					out := make([][]float32, rows)
					for r := range out {
						out[r] = data[r*width : (r+1)*width]
					}
					return out, nil
				},
				ContextLength: 40,
			}.Run(t)
		})
	}
}
