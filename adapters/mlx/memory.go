package mlx

import (
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.MemoryPricer = (*Target)(nil)
	_ ports.MemoryPricer = (*Drafter)(nil)
)

// f32Bytes is a float32's size: the recurrence, its state and tape, and the returned logits stay float32
// whatever the compute dtype; distBytes a distribution's candidate (a token id and a float64 probability).
const (
	f32Bytes  = 4
	distBytes = 12
)

// dtypeBytes is the size of one value of the compute dtype (float32, or bfloat16 when loaded with
// LoadOptions.BFloat16).
func dtypeBytes(dt mlxc.Dtype) int64 {
	if dt == mlxc.BFloat16 {
		return 2
	}
	return 4
}

// SessionBytes prices one target session serving a sequence of demand d (ports.MemoryPricer); see
// sessionBytes. A target holding one pipeline stage prices the whole model's layers (an upper bound for
// this process).
func (t *Target) SessionBytes(d ports.MemoryDemand) int64 {
	return sessionBytes(t.m, dtypeBytes(t.dt), t.kvBits, d)
}

// sessionBytes is what an MLX session of target m holds for d, with dt bytes a value of the compute
// dtype:
//   - the KV caches in the compute dtype, twice: a forward concatenates the old cache and the block into a
//     new array, and the old one is freed only once the whole graph has run and the session adopts the new
//     state;
//   - per recurrent layer the float32 conv buffer and SSM state, twice for the same reason (a tape keeps the
//     pre-block pair as its S₀ and cs₀ until the next Forward), and once more for a snapshot when it
//     speculates;
//   - the tape of a verify block, float32 per position: α [Hv], δ [Hv·dv], k̂ [Hv·dk] and the raw rows [C];
//   - the graph's live activations: MLX frees each intermediate once its last consumer has run, so about two
//     layers' worth for the largest forward's rows (its fused attention keeps no score matrix);
//   - what a Forward returns: float32 logits and a distribution of each of a verify block's rows, and when it
//     speculates the device-resident taps of its largest forward in the compute dtype.
//
// With kvBits 8 the caches hold int8 codes and a float32 scale per position and KV head (twice, as above),
// and a forward reads one layer's cache back into the compute dtype at a time.
func sessionBytes(m *model.Target[*ops.Weight], dt int64, kvBits int, d ports.MemoryDemand) int64 {
	v := model.TargetValues(m)
	P, R, B := int64(max(d.Positions, 0)), int64(max(d.Rows, 1)), int64(max(d.Block, 1))
	R = max(R, B)
	copies := int64(2)
	if d.Speculative {
		copies = 3
	}
	n := 2 * P * v.KVPerPosition * dt
	if kvBits == 8 {
		a := &m.Arch
		n = 2*P*(v.KVPerPosition+v.KVPerPosition/int64(max(a.HeadDim, 1))*f32Bytes) + (P+B)*2*int64(a.KVHeads*a.HeadDim)*dt
	}
	n += copies * (v.Conv + v.SSM) * f32Bytes
	if d.Speculative {
		n += B * (v.ValueHeads + v.ValueWidth + v.KeyValues + v.Channels) * f32Bytes
		n += R * int64(d.TapLayers) * v.Hidden * dt
	}
	n += 2 * R * v.LayerRow * dt
	n += B * v.Vocab * (f32Bytes + distBytes)
	return n
}

// SessionBytes prices one draft session serving a sequence of demand d (ports.MemoryPricer); see
// draftSessionBytes.
func (d *Drafter) SessionBytes(dm ports.MemoryDemand) int64 {
	return draftSessionBytes(&d.m.Arch, dtypeBytes(d.t.dt), dm)
}

// draftSessionBytes is what an MLX draft session of arch a holds for d (0 when it does not speculate): its
// context caches in the compute dtype for every position, twice (concatenated, as the target's), the live
// activations of a context pass over the largest forward's taps and of a pass of the larger of the configured
// and the demanded block (all of a block row's, which ends in the logits), and the block's float32 logits. It
// queues no context rows: each Draft projects its context at once.
func draftSessionBytes(a *hfmodel.DrafterArch, dt int64, d ports.MemoryDemand) int64 {
	if !d.Speculative {
		return 0
	}
	v := model.DrafterValues(a)
	P, R := int64(max(d.Positions, 0)), int64(max(d.Rows, d.Block, 1))
	nb := int64(max(a.BlockSize, d.Block, 1))
	return 2*P*v.KVPerPosition*dt + (R*v.LayerRow+nb*v.Row)*dt + nb*v.Vocab*f32Bytes
}
