package serve

import "github.com/higgs-go/higgs/ports"

// memoryPricing prices a request's sessions for memory admission: each backend prices its own sessions
// (ports.MemoryPricer: its caches, state, tape and scratch in the types it keeps them in); a backend without
// that ability is estimated from its ModelInfo.
type memoryPricing struct {
	target  ports.MemoryPricer
	drafter ports.MemoryPricer // nil without a drafter
	taps    int                // the drafter's tap layers
	// Estimated says the target or the drafter cannot price its own sessions: their figures are estimates
	// from ports.ModelInfo alone, with deliberately generous guesses for the shapes it does not state.
	Estimated bool
}

// pricingFor is e's pricing: its target's and drafter's own, or estimates where they have none.
func pricingFor(e Engine, info ports.ModelInfo) memoryPricing {
	var m memoryPricing
	if p, ok := e.Target.(ports.MemoryPricer); ok {
		m.target = p
	} else {
		m.target, m.Estimated = estimate{info}, true
	}
	if e.Drafter == nil {
		return m
	}
	m.taps = len(e.Drafter.TapLayers())
	if p, ok := e.Drafter.(ports.MemoryPricer); ok {
		m.drafter = p
	} else {
		m.drafter, m.Estimated = draftEstimate{int64(info.HiddenSize)}, true
	}
	return m
}

// requestBytes is what a request reserves: its target session's and, when it speculates (blockSize > 1),
// its draft session's price for every position its sequence can reach (the prompt, its whole token budget
// and one verify block past it), its largest forward (a prefill chunk, or the whole prompt unchunked) and its
// verify block.
func (m memoryPricing) requestBytes(promptLen, budget, blockSize, prefillChunk int) int64 {
	rows := promptLen
	if prefillChunk > 0 {
		rows = min(promptLen, prefillChunk)
	}
	d := ports.MemoryDemand{Positions: promptLen + budget + blockSize, Rows: max(rows, 1), Block: max(blockSize, 1),
		Speculative: blockSize > 1 && m.drafter != nil}
	if d.Speculative {
		d.TapLayers = m.taps
	}
	n := m.target.SessionBytes(d)
	if d.Speculative {
		n += m.drafter.SessionBytes(d)
	}
	return n
}

// estimateBytes is the estimate's size of a value (float32, the widest any backend keeps caches in).
const estimateBytes = 4

// estimate prices a target session from ModelInfo alone, for a backend that cannot price its own: a
// full-width KV per attention layer and position (no grouped-query attention), a hidden×128 state per
// recurrent layer held three times (a double buffer and a snapshot), a tape of 4·hidden per recurrent layer
// and verify position, and 16·hidden of scratch per row of its largest forward, its verify block and a
// plain step, rounded up by 1/8.
type estimate struct{ info ports.ModelInfo }

func (e estimate) SessionBytes(d ports.MemoryDemand) int64 {
	h := int64(e.info.HiddenSize)
	var perPos, perSeq, tape int64
	for _, k := range e.info.LayerKinds {
		if k == ports.LayerRecurrent {
			perSeq += 3 * 128 * h
			tape += 4 * h
			continue
		}
		perPos += 2 * h
	}
	held := int64(d.Rows + d.Block + 1)
	return (int64(d.Positions)*perPos + perSeq + int64(d.Block)*tape + held*16*h*9/8) * estimateBytes
}

// draftEstimate prices a draft session from the target's hidden size alone: a context KV of 2·hidden per
// position and the taps of every position waiting for it.
type draftEstimate struct{ hidden int64 }

func (e draftEstimate) SessionBytes(d ports.MemoryDemand) int64 {
	if !d.Speculative {
		return 0
	}
	return int64(d.Positions) * (2 + int64(d.TapLayers)) * e.hidden * estimateBytes
}

// DefaultMemoryBudget is the admission budget when none is configured: half the machine's memory (on Linux
// the cgroup's memory limit where that is smaller: a container sees the host's RAM otherwise), less the
// prefix cache's budget (the weights, the prefix cache and the rest of the system share the other half), at
// least 256 MiB; 8 GiB where the machine's memory is unknown.
func DefaultMemoryBudget(prefixCacheBytes int64) int64 {
	total := physicalMemory()
	if total <= 0 {
		return 8 << 30
	}
	return max(total/2-prefixCacheBytes, 256<<20)
}

// MachineMemory is the memory this process may use: the machine's RAM, or a container's limit where that is
// smaller; 0 when unknown.
func MachineMemory() int64 { return physicalMemory() }

// EstimateRequestBytes is what a request would reserve on a model described by info, priced from ModelInfo
// alone as for a backend that cannot price its own sessions (estimate, draftEstimate: deliberately
// generous), with a drafter of taps tap layers (0: none). For checks made before a model is loaded (higgsd
// doctor); a loaded backend prices its own sessions, usually lower.
func EstimateRequestBytes(info ports.ModelInfo, taps, promptLen, budget, blockSize, prefillChunk int) int64 {
	m := memoryPricing{target: estimate{info}, Estimated: true}
	if taps > 0 {
		m.drafter, m.taps = draftEstimate{int64(info.HiddenSize)}, taps
	}
	return m.requestBytes(promptLen, budget, blockSize, prefillChunk)
}
