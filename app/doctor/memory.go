package doctor

import (
	"fmt"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/serve"
)

// memoryChecks weigh the weights against the machine's memory, and the admission budget against the
// machine and against the requests it must hold. Requests are priced with serve.EstimateRequestBytes,
// the estimate from config.json alone (generous: a loaded backend prices its sessions lower), so a request
// the estimate cannot fit is a warning, and only a budget that cannot hold the smallest request fails.
func memoryChecks(cfg app.Config, in models.Inspection, machine int64) []Check {
	weights := in.WeightBytes + in.DrafterBytes
	mem := Check{Name: "memory", Status: OK}
	switch {
	case machine <= 0:
		mem.Status, mem.Detail = Warn, fmt.Sprintf("weights %s; this machine's memory is unknown, so nothing is checked against it", human(weights))
		mem.Fix = "set --memory-budget-bytes to what the requests may use"
	case weights > machine:
		mem.Status = Fail
		mem.Detail = fmt.Sprintf("the weights (%s) exceed this machine's memory (%s)", human(weights), human(machine))
		mem.Fix = "serve a smaller or more quantized model, or on a machine with more memory"
	default:
		mem.Detail = fmt.Sprintf("weights %s of %s", human(weights), human(machine))
	}
	budget := cfg.MemoryBudget
	origin := "--memory-budget-bytes"
	if budget == 0 {
		budget, origin = serve.DefaultMemoryBudget(cfg.PrefixCacheBytes), "default: half the memory less the prefix cache"
	}
	b := Check{Name: "budget", Status: OK}
	sc := cfg.ServeConfig()
	taps, bs := 0, 1
	if in.Drafter != nil && sc.BlockSize != 1 {
		taps, bs = len(in.Drafter.TapLayers), in.Drafter.BlockSize
		if sc.BlockSize > 1 {
			bs = sc.BlockSize
		}
	}
	ctxLen := in.Info.ContextLength
	if cfg.ContextLength > 0 {
		ctxLen = cfg.ContextLength
	}
	out := sc.DefaultMaxTokens
	if out <= 0 {
		out = serve.FallbackMaxTokens
	}
	if ctxLen > 0 {
		out = min(out, ctxLen-1)
	}
	smallest := serve.EstimateRequestBytes(in.Info, taps, 1, 1, bs, sc.PrefillChunk)
	typical := serve.EstimateRequestBytes(in.Info, taps, 1, out, bs, sc.PrefillChunk)
	b.Detail = fmt.Sprintf("%s (%s) holds about %d requests of %d output tokens (%s each, estimated)",
		human(budget), origin, budget/max(typical, 1), out, human(typical))
	switch {
	case smallest > budget:
		b.Status = Fail
		b.Detail = fmt.Sprintf("%s (%s) cannot hold even a one-token request (%s, estimated): every request would be refused",
			human(budget), origin, human(smallest))
		b.Fix = fmt.Sprintf("raise --memory-budget-bytes to at least %s (more for longer requests), or 0 for the default", app.FormatByteSize(roundUpMiB(typical)))
		return []Check{mem, b}
	case typical > budget:
		b.Status = Warn
		b.Detail = fmt.Sprintf("%s (%s) cannot hold a request of %d output tokens (%s, estimated): requests that long are refused",
			human(budget), origin, out, human(typical))
		b.Fix = fmt.Sprintf("raise --memory-budget-bytes to at least %s", app.FormatByteSize(roundUpMiB(typical)))
	case ctxLen > 0:
		if full := serve.EstimateRequestBytes(in.Info, taps, ctxLen-out, out, bs, sc.PrefillChunk); full > budget {
			b.Detail += fmt.Sprintf("; a request filling the %d-token context (%s) does not fit and would be refused", ctxLen, human(full))
		}
	}
	if machine > 0 {
		if total := weights + cfg.PrefixCacheBytes + budget; total > machine {
			b.Status = Warn
			if b.Fix == "" {
				b.Fix = "lower --memory-budget-bytes or --prefix-cache-bytes"
			}
			b.Detail += fmt.Sprintf("; weights + prefix cache (%s) + budget make %s, more than this machine's %s: the system may swap",
				human(cfg.PrefixCacheBytes), human(total), human(machine))
		}
	}
	return []Check{mem, b}
}

// roundUpMiB rounds n up to a whole MiB, a size a flag reads back.
func roundUpMiB(n int64) int64 { return (n + 1<<20 - 1) >> 20 << 20 }
