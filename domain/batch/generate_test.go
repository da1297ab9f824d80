package batch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// request is one generation of the concurrent test.
type request struct {
	prompt []ports.Token
	cfg    speculative.Config
	seed   uint64
	// after is the number of rounds the scheduler has run when the request arrives.
	after int
}

func (r request) String() string {
	return fmt.Sprintf("prompt %d, bs %d, T %g, chunk %d", len(r.prompt), r.cfg.BlockSize, r.cfg.Sampling.Temperature, r.cfg.PrefillChunk)
}

// generateOne runs one request's decoder on fresh sessions; with m set, through the member's rounds.
func generateOne(t *testing.T, target ports.Target, drafter ports.Drafter, m *Member, r request) speculative.Result {
	ctx := context.Background()
	var taps []int
	if r.cfg.BlockSize > 1 {
		taps = drafter.TapLayers()
	}
	raw, err := target.NewSession(ctx, taps)
	require.NoError(t, err)
	defer raw.Close()
	var sess ports.Session = raw
	var draft ports.DraftSession
	if r.cfg.BlockSize > 1 {
		ds, err := drafter.NewSession(ctx)
		require.NoError(t, err)
		defer ds.Close()
		draft = ds
	}
	cfg := r.cfg
	if m != nil {
		sess = m.Session(raw)
		if draft != nil {
			draft = m.DraftSession(draft)
		}
		if cfg.Adaptive {
			cfg.Policy.Batch = m
		}
	}
	dec, err := speculative.New(cfg, portfake.NewClock(time.Millisecond), portfake.NewRand(r.seed))
	require.NoError(t, err)
	res, err := dec.Generate(ctx, sess, draft, r.prompt, func([]ports.Token) error { return nil })
	require.NoError(t, err, "%v", r)
	return res
}

func mixedRequests(vocab int) []request {
	var rs []request
	for i := range 8 {
		prompt := make([]ports.Token, 3+7*i)
		for j := range prompt {
			prompt[j] = ports.Token((j*5 + i*11 + 1) % vocab)
		}
		cfg := speculative.Config{BlockSize: []int{1, 4, 6, 2}[i%4], MaxTokens: 10 + 5*(i%3), Verify: speculative.VerifyMatch,
			Rollback: speculative.RollbackMode(i % 3), Adaptive: i%4 == 2}
		if i%2 == 1 {
			cfg.Sampling = ports.SamplingParams{Temperature: 0.7, TopK: 8}
		}
		if i%3 == 0 {
			cfg.PrefillChunk = 4
		}
		if i%4 == 1 || i == 6 {
			// Trees: fixed ones run on their own in the shared rounds; the adaptive policy weighs them only
			// while its generation runs alone.
			cfg.Tree = speculative.TreeConfig{Budget: 6 + i%3, Width: 2}
		}
		rs = append(rs, request{prompt: prompt, cfg: cfg, seed: uint64(100 + i), after: []int{0, 0, 3, 5, 9, 14, 20, 30}[i]})
	}
	return rs
}

// TestConcurrentGenerationsEqualSolo: eight decoders of mixed prompts, lengths, block sizes (plain decoding
// included), rollbacks, greedy and seeded sampling, fixed and adaptive, some with chunked prefill, arriving
// at different rounds, each decoding through the scheduler's shared rounds, return exactly their solo
// outputs; τ of every fixed-block request equals its solo τ. Run on a target and drafter that batch, and on
// ones that do not (the sequential fallback).
func TestConcurrentGenerationsEqualSolo(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%t", batched), func(t *testing.T) {
			model := portfake.MustNew(portfake.Config{Tape: true, Vocab: 48, Seed: 5})
			dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 6, Propose: portfake.MatchThenDiverge(model, 3)})
			require.NoError(t, err)
			var target ports.Target = plainTarget{model}
			var drafter ports.Drafter = plainDrafter{dr}
			bt, bd := &batchTarget{Model: model}, &batchDrafter{Drafter: dr}
			if batched {
				target, drafter = bt, bd
			}
			reqs := mixedRequests(48)
			solo := make([]speculative.Result, len(reqs))
			for i, r := range reqs {
				solo[i] = generateOne(t, model, dr, nil, r)
			}

			// Later requests join from the scheduler's own round report once their arrival round has run, so
			// which rounds they share is the same on every run; a request whose round never comes (every
			// earlier one has finished) joins once the scheduler is idle.
			var roundsRun atomic.Int64
			var mu sync.Mutex
			var seqs []int
			members := make([]*Member, len(reqs))
			joined := make([]chan struct{}, len(reqs))
			once := make([]sync.Once, len(reqs))
			var s *Scheduler
			join := func(i int) {
				once[i].Do(func() {
					members[i] = s.Join()
					close(joined[i])
				})
			}
			for i := range reqs {
				joined[i] = make(chan struct{})
			}
			s, err = New(Config{MaxWait: time.Hour, Observe: func(r Round) {
				n := roundsRun.Add(1)
				mu.Lock()
				seqs = append(seqs, r.Sequences)
				mu.Unlock()
				for i, q := range reqs {
					if q.after > 0 && n >= int64(q.after) {
						join(i)
					}
				}
			}}, newManualClock(), target, drafter)
			require.NoError(t, err)

			got := make([]speculative.Result, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				if r.after == 0 {
					join(i)
				}
			}
			for i := range reqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-joined[i]:
						case <-time.After(time.Millisecond):
							if s.active() == 0 {
								join(i)
							}
							continue
						}
						break
					}
					m := members[i]
					defer m.Leave()
					got[i] = generateOne(t, target, drafter, m, reqs[i])
				}()
			}
			wg.Wait()
			for i, r := range reqs {
				if r.cfg.Tree.Budget > 0 && !r.cfg.Adaptive {
					trees := 0
					for _, rs := range got[i].Stats.Rounds {
						if rs.Tree != nil {
							trees++
						}
					}
					assert.Positive(t, trees, "request %d verified trees through the scheduler", i)
				}
				assert.Equal(t, solo[i].Tokens, got[i].Tokens, "request %d (%v): batched output differs from solo", i, r)
				if !r.cfg.Adaptive {
					assert.Equal(t, solo[i].Stats.SpecUsage().Tau, got[i].Stats.SpecUsage().Tau, "request %d: τ", i)
				}
			}
			most := 0
			for _, n := range seqs {
				most = max(most, n)
			}
			assert.GreaterOrEqual(t, most, 3, "rounds served several sequences at once")
			if batched {
				assert.NotEmpty(t, bt.sizes(), "batched forwards ran")
				assert.NotEmpty(t, bd.sizes(), "batched drafts ran")
			}
		})
	}
}
