package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// TestSessionBytesCoverWhatSessionsHold: on a tiny hybrid target with a DFlash or DFlash2 drafter, a
// speculating sequence (a chunked prefill, verify blocks with tapes and snapshots, drafts) holds in its KV
// caches, recurrent state, arena and queued context no more than SessionBytes prices for it; what is known
// exactly (the state, the KV values of every position, one pass's arena) is priced exactly.
func TestSessionBytesCoverWhatSessionsHold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v2     bool
		kvBits int
	}{{"dflash", false, 32}, {"dflash2", true, 32}, {"dflash kv8", false, 8}} {
		v2 := tc.v2
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			tg, err := Load(ctx, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 51}), LoadOptions{Threads: 2, KVBits: tc.kvBits})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(ctx, testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 52, Taps: []int{0, 3}, Mask: 63, Nested: v2, DFlash2: v2}), tg, DrafterOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })

			const prompt, chunk, block, steps = 150, 64, 4, 6
			dem := ports.MemoryDemand{Positions: prompt + steps*block + block, Rows: chunk, Block: block, Speculative: true, TapLayers: len(d.TapLayers())}
			sess, err := tg.NewSession(ctx, d.TapLayers())
			require.NoError(t, err)
			defer sess.Close()
			ds, err := d.NewSession(ctx)
			require.NoError(t, err)
			defer ds.Close()

			toks := make([]ports.Token, prompt)
			for i := range toks {
				toks[i] = ports.Token(i*7%60 + 1)
			}
			var last ports.ForwardResult
			for lo := 0; lo < prompt; lo += chunk {
				last, err = sess.Forward(ctx, toks[lo:min(prompt, lo+chunk)], ports.ForwardOptions{Rows: 1, Taps: true})
				require.NoError(t, err)
				_, err = ds.Draft(ctx, 0, last.Taps, 1) // context only: queued
				require.NoError(t, err)
			}
			var snap ports.RecurrentSnapshot
			anchor := last.Greedy[0]
			for range steps {
				p, err := ds.Draft(ctx, anchor, nil, block)
				require.NoError(t, err)
				snap, err = sess.Snapshot()
				require.NoError(t, err)
				fr, err := sess.Forward(ctx, append([]ports.Token{anchor}, p.Tokens...), ports.ForwardOptions{Taps: true, RecordTape: true})
				require.NoError(t, err)
				anchor = fr.Greedy[block-1]
				_, err = ds.Draft(ctx, 0, fr.Taps, 1)
				require.NoError(t, err)
			}

			s, dsess := sess.(*Session), ds.(*DraftSession)
			pr, dp := tg.price(dem), d.price(dem)
			assert.Equal(t, pr.total(), tg.SessionBytes(dem))
			assert.Equal(t, dp.total(), d.SessionBytes(dem))

			// The KV caches: every position's keys and values as model.TargetValues counts them, within the price.
			var kvLen, kvCap, scales int64
			for _, c := range s.kv {
				if c != nil {
					kvLen += int64(len(c.k) + len(c.v) + len(c.k8) + len(c.v8))
					scales += int64(len(c.ks) + len(c.vs))
					kvCap += c.capBytes()
				}
			}
			v := model.TargetValues(tg.m)
			require.Positive(t, v.KVPerPosition)
			assert.Equal(t, int64(s.Len())*v.KVPerPosition, kvLen, "the KV values held")
			perValue := int64(f32Bytes)
			if tc.kvBits == 8 {
				perValue = 1
				a := tg.m.Arch
				assert.Equal(t, kvLen/int64(a.HeadDim), scales, "one scale per position and KV head")
			} else {
				assert.Zero(t, scales)
			}
			assert.LessOrEqual(t, kvCap, pr.kv, "the KV caches' capacity")
			assert.LessOrEqual(t, pr.kv, 2*int64(dem.Positions)*v.KVPerPosition*perValue+int64(2*len(s.kv))*2240*f32Bytes+2*scales*2*f32Bytes, "not priced far above")

			// The recurrent state: conv buffers, ping-pong SSM states and one snapshot, exactly.
			var state int64
			for _, g := range s.gdn {
				if g != nil {
					state += int64(cap(g.conv) + cap(g.s[0]) + cap(g.s[1]))
				}
			}
			sn := snap.(*Snapshot)
			for i := range sn.conv {
				state += int64(cap(sn.conv[i]) + cap(sn.ssm[i]))
			}
			require.Positive(t, state)
			assert.Equal(t, state*f32Bytes, pr.state, "the recurrent state and its snapshot")

			// The arena (which holds the last verify block's tape) within its price.
			require.Positive(t, s.mem.held)
			assert.LessOrEqual(t, int64(s.mem.held)*f32Bytes, pr.scratch, "the target session's arena")

			// The draft session: context caches, queued rows, arena, logits.
			var dkv int64
			for _, c := range dsess.kv {
				dkv += int64(cap(c.k) + cap(c.v))
			}
			dv := model.DrafterValues(&d.m.Arch)
			assert.Equal(t, int64(dsess.n)*dv.KVPerPosition, func() int64 {
				var n int64
				for _, c := range dsess.kv {
					n += int64(len(c.k) + len(c.v))
				}
				return n
			}(), "the drafter's context values held")
			assert.LessOrEqual(t, dkv*f32Bytes, dp.kv)
			assert.LessOrEqual(t, int64(cap(dsess.queued)+cap(dsess.logits))*f32Bytes, dp.out)
			assert.LessOrEqual(t, int64(dsess.mem.held)*f32Bytes, dp.scratch, "the draft session's arena")

			// One pass's arena, on a fresh session: every value model.TargetValues counts for its rows and the conv
			// windows (the tape's), rounded up by its size classes.
			fresh, err := tg.NewSession(ctx, d.TapLayers())
			require.NoError(t, err)
			defer fresh.Close()
			_, err = fresh.Forward(ctx, toks[:block], ports.ForwardOptions{Taps: true, RecordTape: true})
			require.NoError(t, err)
			want := int64(block)*v.Row + v.Conv
			assert.GreaterOrEqual(t, int64(fresh.(*Session).mem.held), want, "a verify pass's arena")
			assert.LessOrEqual(t, int64(fresh.(*Session).mem.held), want+want/8, "a verify pass's arena")

			// A prefill chunk of 32 rows or more scopes its buffers by layer, and is priced so: far below its
			// every layer's activations at once.
			scopeLayers = false
			unscoped := tg.price(dem).scratch
			scopeLayers = true
			assert.Less(t, pr.scratch, unscoped, "a scoped prefill chunk's arena is priced below an unscoped one")

			// A sequence that does not speculate has no draft session and prices no snapshot.
			plain := dem
			plain.Speculative, plain.Block, plain.TapLayers = false, 1, 0
			assert.Zero(t, d.SessionBytes(plain))
			assert.Less(t, tg.price(plain).state, pr.state)
			// Prices grow with every field of the demand.
			for _, more := range []ports.MemoryDemand{
				{Positions: dem.Positions + 100, Rows: dem.Rows, Block: dem.Block, Speculative: true, TapLayers: dem.TapLayers},
				{Positions: dem.Positions, Rows: dem.Rows * 2, Block: dem.Block, Speculative: true, TapLayers: dem.TapLayers},
				{Positions: dem.Positions, Rows: dem.Rows, Block: dem.Block * 2, Speculative: true, TapLayers: dem.TapLayers},
			} {
				assert.Greater(t, tg.SessionBytes(more), tg.SessionBytes(dem), "%+v", more)
				assert.GreaterOrEqual(t, d.SessionBytes(more), d.SessionBytes(dem), "%+v", more)
			}
			t.Logf("target: priced %+v (%d bytes); held kv %d, state %d, arena %d bytes", pr, pr.total(), kvCap, state*f32Bytes, s.mem.held*f32Bytes)
			t.Logf("drafter: priced %+v (%d bytes); held kv %d, arena %d bytes", dp, dp.total(), dkv*f32Bytes, dsess.mem.held*f32Bytes)
		})
	}
}
