package fleet

import (
	"context"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.SystemReporter = (*Fleet)(nil)

// System implements ports.SystemReporter over every model: the version, uptime and process memory are the
// server's (the first model's Serve reports them), the models are every loaded one, and with several models
// the budget is the shared one and the prefix cache the loaded models' budgets together.
func (f *Fleet) System(ctx context.Context, scope ports.SystemScope) (ports.SystemReport, error) {
	if f.single() {
		return f.entries[0].serve.System(ctx, scope)
	}
	var r ports.SystemReport
	for i, e := range f.entries {
		one, err := e.serve.System(ctx, scope)
		if err != nil {
			return ports.SystemReport{}, err
		}
		if i == 0 {
			r = one
			r.Models = append([]ports.SystemModel{}, one.Models...)
			if one.Memory != nil {
				m := *one.Memory
				m.Budget, m.Reserved = f.shared.Budget.Total(), f.shared.Budget.Used()
				r.Memory = &m
			}
			continue
		}
		r.Models = append(r.Models, one.Models...)
		if r.Memory != nil && one.Memory != nil && r.Memory.Device == nil {
			r.Memory.Device = one.Memory.Device // one allocator for the whole process
		}
	}
	if r.Memory != nil {
		// Each Serve states its configured prefix cache; count only the loaded models', which hold one.
		r.Memory.PrefixCache = 0
		for _, e := range f.entries {
			r.Memory.PrefixCache += e.serve.PrefixCacheStats().Budget
		}
	}
	return r, nil
}
