package mlx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
)

// TestSessionBytesArithmetic checks the MLX pricing of a small hybrid target and its drafter, term by term,
// against figures worked out by hand from the shapes (no libmlxc needed).
func TestSessionBytesArithmetic(t *testing.T) {
	a := hfmodel.Arch{Hidden: 64, Vocab: 100, Layers: 4,
		Kinds: []ports.LayerKind{ports.LayerRecurrent, ports.LayerAttention, ports.LayerRecurrent, ports.LayerAttention},
		Heads: 4, KVHeads: 2, HeadDim: 16, KeyHeads: 2, ValueHeads: 4, KeyDim: 8, ValueDim: 8, ConvKernel: 4,
		Intermediate: 128, MoE: make([]bool, 4)}
	d := ports.MemoryDemand{Positions: 100, Rows: 16, Block: 4, Speculative: true, TapLayers: 2}
	// Per recurrent layer C = 2·2·8 + 4·8 = 64 channels, Hv·dv = 32, conv 3·64 = 192 values, SSM 4·8·8 = 256.
	// The largest layer's row (recurrent, as fused, for an arch without loaded layers): 4·64 (norms,
	// residuals) + 5·64 + 5·32 + 6·4 (projections, conv, gates, δ, output) + 64 (out) + 5·128 + 64 (MLP) = 1528
	// values (attention's: 4·64 + 4·64 + 4·32 + 64 + 5·128 + 64 = 1408).
	const (
		kv32    = 2 * 100 * (2 * 2 * 32) * 4     // old + new cache, 100 positions, 2 layers × K,V × 32, float32
		state   = 3 * 2 * (192 + 256) * 4        // state, S₀ kept by the tape, snapshot; 2 recurrent layers; float32
		tape    = 4 * 2 * (4 + 32 + 32 + 64) * 4 // 4 positions; α, δ, k̂, rows per layer; float32
		taps32  = 16 * 2 * 64 * 4                // 16 rows × 2 taps × hidden 64
		graph32 = 2 * 16 * 1528 * 4              // two layers' rows live, 16 rows
		outs    = 4 * 100 * (4 + 12)             // a verify block's logits and distributions
	)
	assert.Equal(t, int64(kv32+state+tape+taps32+graph32+outs), sessionBytes(&model.Target[*ops.Weight]{Arch: a}, dtypeBytes(mlxc.Float32), 32, d))
	// bfloat16 halves what is kept in the compute dtype; the recurrence, its tape and the logits stay float32.
	assert.Equal(t, int64(kv32/2+state+tape+taps32/2+graph32/2+outs), sessionBytes(&model.Target[*ops.Weight]{Arch: a}, dtypeBytes(mlxc.BFloat16), 32, d))

	// 8-bit KV: per position 2 layers × K,V × 2 heads of 16 int8 codes and a float32 scale, old and new cache;
	// and one layer's cache read back in the compute dtype, over the cache and the block (100 + 4 positions).
	const kv8 = 2*100*(2*2*2*(16+4)) + (100+4)*2*(2*16)*4
	assert.Equal(t, int64(kv8+state+tape+taps32+graph32+outs), sessionBytes(&model.Target[*ops.Weight]{Arch: a}, dtypeBytes(mlxc.Float32), 8, d))
	assert.Less(t, kv8, kv32)

	// Plain decoding: no snapshot, no tape, no taps, blocks of one row.
	p := ports.MemoryDemand{Positions: 100, Rows: 16, Block: 1}
	assert.Equal(t, int64(kv32+2*2*(192+256)*4+graph32+100*16), sessionBytes(&model.Target[*ops.Weight]{Arch: a}, 4, 32, p))

	// The drafter: one layer, K,V of 2 heads × 16 a position; a block row 2·64 + 1664 + 100 logits = 1892
	// values, a context row 2·64 (taps) + 2·64 + 4·32 = 384.
	da := hfmodel.DrafterArch{HiddenSize: 64, NumLayers: 1, NumHeads: 4, NumKVHeads: 2, HeadDim: 16, IntermediateSize: 128,
		BlockSize: 4, TapLayers: []int{0, 3}, VocabSize: 100}
	assert.Equal(t, int64(2*100*64*4+(16*384+4*1892)*4+4*100*4), draftSessionBytes(&da, 4, d))
	assert.Zero(t, draftSessionBytes(&da, 4, p), "no draft session without speculation")
}

// TestSessionBytesCoverActiveMemory: a speculating session (a prefill with taps, verify blocks with tapes, a
// snapshot) holds no more of MLX's active memory than its price, and at least its caches.
func TestSessionBytesCoverActiveMemory(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 33, Layers: 4, Vocab: 96}})
	const block, steps = 4, 5
	taps := []int{0, 3}
	d := ports.MemoryDemand{Positions: len(prompt) + steps*block + block, Rows: len(prompt), Block: block, Speculative: true, TapLayers: len(taps)}
	base := activeMemory(t, tg)
	s, err := tg.NewSession(t.Context(), taps)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Forward(t.Context(), prompt, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	var snap ports.RecurrentSnapshot
	for range steps {
		snap, err = s.Snapshot()
		require.NoError(t, err)
		_, err = s.Forward(t.Context(), []ports.Token{1, 2, 3, 4}, ports.ForwardOptions{Taps: true, RecordTape: true})
		require.NoError(t, err)
	}
	held := int64(activeMemory(t, tg) - base)
	priced := tg.SessionBytes(d)
	kv := int64(s.Len()) * model.TargetValues(tg.m).KVPerPosition * dtypeBytes(tg.dt)
	// MLX's allocator may round a small buffer up to a page (16 KiB on Apple silicon): allow that for each
	// array the session holds (K and V per attention layer; per recurrent layer the state, the tape's S₀ and
	// four arrays, the snapshot; the taps).
	arrays := int64(1)
	for _, k := range tg.m.Arch.Kinds {
		if k == ports.LayerAttention {
			arrays += 2
		} else {
			arrays += 2 + 2 + 4 + 2
		}
	}
	t.Logf("session holds %d bytes of MLX's active memory (%d of them KV); priced %d, %d arrays", held, kv, priced, arrays)
	assert.GreaterOrEqual(t, held, kv)
	assert.LessOrEqual(t, held, priced+arrays*16<<10)
	require.NotNil(t, snap)
}
