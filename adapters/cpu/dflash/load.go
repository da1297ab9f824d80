package dflash

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// loadWeights maps dir's safetensors and builds a drafter of architecture a bound to target.
func loadWeights(dir string, a Arch, target Target, pool *kernel.Pool) (*Drafter, error) {
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("drafter weights: %w", err)
	}
	ws, err := newWeightSet(st, pool)
	if err == nil {
		var d *Drafter
		if d, err = build(a, ws, target, pool); err == nil {
			d.closeFns = append(d.closeFns, st.Close)
			return d, nil
		}
	}
	_ = st.Close()
	return nil, fmt.Errorf("drafter %s: %w", dir, err)
}
