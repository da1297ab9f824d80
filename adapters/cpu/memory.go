package cpu

import (
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.MemoryPricer = (*Target)(nil)
	_ ports.MemoryPricer = (*Drafter)(nil)
)

// The CPU backend keeps every cache, state, tape, activation and logit in float32; a distribution keeps a
// token id (4 bytes) and a float64 probability per candidate (sampling.Dist), at most the vocabulary.
const (
	f32Bytes  = 4
	distBytes = 12
)

// growth bounds the capacity of a slice grown by append to n values: Go grows a slice of 256 values or more
// by a quarter plus 192 values, then rounds the allocation up (by at most a page, 8 KiB, for large ones), so
// the capacity never passes n·5/4 + 192 + 2,048 values.
func growth(n int64) int64 { return n + n/4 + 192 + 2048 }

// price is a session's bytes by what holds them (memory.go's pricing, itemised so tests can check each
// against what a session really allocated).
type price struct {
	// kv: the attention caches (one slice of keys and one of values per layer, grown by append).
	kv int64
	// state: the recurrent layers' conv buffers and ping-pong SSM states, and a snapshot's copy of both.
	state int64
	// scratch: the session's arena (see scratchBytes), which holds the tape too, and the attention workers'
	// scores.
	scratch int64
	// out: what a Forward or Draft returns that the caller holds for a round: logits, distributions, taps;
	// for a draft session, the context rows it queues until it next drafts.
	out int64
}

func (p price) total() int64 { return p.kv + p.state + p.scratch + p.out }

// scratchBytes bounds an arena's bytes when the passes it serves ask for all values in all (each buffer
// counted once per pass shape: the arena keeps every buffer a pass asked for, by size class, one set per
// shape) and largest in the largest run between two resets. Size classes round up by at most 1/8. The arena
// keeps at most arenaBudget values; past that a pass allocates afresh what it does not find kept (garbage
// once the pass ends), so the most it holds is the budget plus the largest pass.
func scratchBytes(all, largest int64) int64 {
	if all += all / 8; all <= arenaBudget {
		return all * f32Bytes
	}
	return (arenaBudget + largest + largest/8) * f32Bytes
}

// SessionBytes prices one target session serving a sequence of demand d (ports.MemoryPricer): its KV caches
// (float32, or int8 codes and a float32 scale per position and KV head with LoadOptions.KVBits 8) for every
// position grown by append (growth); per recurrent layer the conv buffer once and the
// SSM state twice (the ping-pong buffers), plus one snapshot of both when it speculates; the arena over the
// pass shapes a sequence runs (scratchBytes: the largest prefill forward and a shorter last chunk, one layer's
// worth where their layers give their buffers back, a verify block of every size up to Block, a plain step;
// each recurrent layer's conv window adds Kc−1 rows a pass and its tape lives in the arena) and one attention layer's scores over every position in the workers;
// and what a Forward returns: the logits and a distribution of each of a verify block's rows, and when it
// speculates the taps of its largest forward.
func (t *Target) SessionBytes(d ports.MemoryDemand) int64 { return t.price(d).total() }

func (t *Target) price(d ports.MemoryDemand) price {
	v := model.TargetValues(t.m)
	P, R, B := int64(max(d.Positions, 0)), int64(max(d.Rows, 1)), int64(max(d.Block, 1))
	var p price
	kvd, kvh := int64(t.m.Arch.KVHeads*t.m.Arch.HeadDim), int64(t.m.Arch.KVHeads)
	var attn int64 // attention layers
	for _, k := range t.m.Arch.Kinds {
		if k == ports.LayerAttention {
			attn++
		}
	}
	// Keys and values, each kvd a position: float32, or in the 8-bit mode kvd int8 codes and kvh float32
	// scales (kvcache.go).
	if t.kvBits == 8 {
		p.kv = attn * 2 * (growth(P*kvd) + growth(P*kvh)*f32Bytes)
	} else {
		p.kv = attn * 2 * growth(P*kvd) * f32Bytes
	}
	copies := int64(2)
	if d.Speculative {
		copies = 3
	}
	p.state = (v.Conv*(copies-1) + v.SSM*copies) * f32Bytes
	var all, largest int64
	var q8Row int64 // the 8-bit mode's arena values a pass row adds: each attention layer's read-back values
	if t.kvBits == 8 {
		q8Row = attn * kvd
	}
	var taps int64 // the layers whose outputs a prefill keeps for the drafter
	if d.Speculative {
		taps = int64(d.TapLayers)
	}
	for i, r := range passShapes(R, B) {
		row := v.Row + q8Row
		if i < 2 && scoped(int(r)) {
			// A prefill chunk's layers give their buffers back at their end (arena.endLayer): it holds one
			// layer's activations, the embedding, a layer's input and output, and the outputs its taps keep.
			row = v.LayerRow + q8Row + (3+taps)*v.Hidden
		}
		n := r*row + v.Conv
		all += n
		largest = max(largest, n)
	}
	p.scratch = scratchBytes(all, largest) + v.Heads*(P+B)*f32Bytes
	if t.kvBits == 8 {
		// Each worker's rows read back (kvChunk of them and d values of tmp, kvcache.go) and the codes and
		// scales of the largest pass's keys and values, made anew for each attention layer.
		p.scratch += int64(t.pool.Threads())*(kvChunk+1)*int64(t.m.Arch.HeadDim)*f32Bytes +
			attn*2*max(R, B)*(kvd+kvh*f32Bytes)
	}
	p.out = B * v.Vocab * (f32Bytes + distBytes)
	if d.Speculative {
		p.out += max(R, B) * int64(d.TapLayers) * v.Hidden * f32Bytes
	}
	return p
}

// passShapes are the rows of each pass shape a sequence runs: a prefill forward of R rows and a shorter last
// chunk (at most R rows), a verify block of every size up to B (the adaptive policy changes it), a plain step.
func passShapes(R, B int64) []int64 {
	rows := []int64{R, R}
	for b := int64(2); b <= B; b++ {
		rows = append(rows, b)
	}
	return append(rows, 1)
}

// SessionBytes prices one draft session serving a sequence of demand d (ports.MemoryPricer); 0 when it does
// not speculate (no draft session). It holds its float32 context caches for every position (grown by
// append), the context rows queued by context-only calls (at most every position's taps, grown by append),
// the arena over one drafting call (the queued and new context rows projected contextChunk rows at a time,
// at most every position, then a pass of the larger of the configured and the demanded block; the arena is
// reset once a call), one attention layer's scores, and the last block's logits.
func (dr *Drafter) SessionBytes(d ports.MemoryDemand) int64 { return dr.price(d).total() }

func (dr *Drafter) price(d ports.MemoryDemand) price {
	if !d.Speculative {
		return price{}
	}
	a := &dr.m.Arch
	v := model.DrafterValues(a)
	P := int64(max(d.Positions, 0))
	nb := int64(max(a.BlockSize, d.Block, 1))
	kvd := int64(a.NumKVHeads * a.HeadDim)
	var p price
	p.kv = int64(a.NumLayers) * 2 * growth(P*kvd) * f32Bytes
	chunk := min(int64(contextChunk), max(P, 1)) * v.LayerRow
	p.scratch = scratchBytes(P*v.LayerRow+nb*v.Row, max(chunk, nb*v.Row)) + v.Heads*(P+nb)*f32Bytes
	p.out = growth(P*v.Hidden)*f32Bytes + nb*v.Vocab*f32Bytes
	return p
}
