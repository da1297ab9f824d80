package verify

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// ClientsOptions configure bench --clients: each count of concurrent clients is measured with speculation
// off and on, decoding together through the batch scheduler as higgsd does.
type ClientsOptions struct {
	// Clients lists the client counts (each ≥ 1).
	Clients []int
	// PrefillChunk is the prefill chunk in tokens (0: whole prompts); BatchWait the rounds' wait bound (0:
	// the scheduler's default).
	PrefillChunk int
	BatchWait    time.Duration
}

// BenchClientsRow is one client count's figures, speculation off ("ar") and on ("spec").
type BenchClientsRow struct {
	Clients int                `json:"clients"`
	AR      BenchClientsFigure `json:"ar"`
	Spec    BenchClientsFigure `json:"spec"`
	// Speedup is spec's aggregate tokens/s over ar's.
	Speedup float64 `json:"speedup"`
}

// BenchClientsFigure is one configuration under N concurrent clients.
type BenchClientsFigure struct {
	// TokensPerS is the aggregate: every client's generated tokens over the wall time from the clients'
	// common start to the last one's end (prefill included), median over passes.
	TokensPerS float64 `json:"tokens_per_s"`
	// Scaling is TokensPerS over the same configuration's with one client (when 1 is among the counts).
	Scaling float64 `json:"scaling,omitempty"`
	// P50ITLMs and P95ITLMs are the medians over clients of each client's 50th and 95th percentile
	// inter-token latency; WorstP95ITLMs the largest client p95. A client's inter-token latencies are, for
	// each emitted chunk after the first token, the time since its previous chunk divided over the chunk's
	// tokens (one sample per token: what a reader of the stream waits per token).
	P50ITLMs      float64 `json:"p50_itl_ms"`
	P95ITLMs      float64 `json:"p95_itl_ms"`
	WorstP95ITLMs float64 `json:"worst_p95_itl_ms"`
	// ITLRatio is P50ITLMs over the same configuration's with one client.
	ITLRatio float64 `json:"itl_ratio,omitempty"`
	// Tau is the mean tokens committed per draft–verify round (spec only).
	Tau float64 `json:"tau,omitempty"`
	// MeanBatch is the mean number of sequences per target forward round.
	MeanBatch float64 `json:"mean_batch"`
	Tokens    int     `json:"tokens"`
	Runs      int     `json:"runs"`
	// BlockSize and Adaptive are the speculative configuration (spec only).
	BlockSize int  `json:"block_size,omitempty"`
	Adaptive  bool `json:"adaptive,omitempty"`
}

// BenchClientsMeta says how the rounds ran: batched calls or one item after another.
type BenchClientsMeta struct {
	BatchedForward bool `json:"batched_forward"`
	BatchedDraft   bool `json:"batched_draft"`
}

// benchClients measures every client count of co, speculation off and on; o supplies the prompts, token
// budget, passes, block size and sampling (client k of a pass decodes prompt k mod len(prompts), seeded
// with Seed + k).
func benchClients(ctx context.Context, m *models.Models, o BenchOptions, co ClientsOptions) ([]BenchClientsRow, BenchClientsMeta, error) {
	var meta BenchClientsMeta
	for _, n := range co.Clients {
		if n < 1 {
			return nil, meta, fmt.Errorf("%w: --clients %d must be ≥ 1", ErrBadInput, n)
		}
	}
	if co.PrefillChunk < 0 || co.BatchWait < 0 {
		return nil, meta, fmt.Errorf("%w: --prefill-chunk %d and --batch-wait %v must be ≥ 0", ErrBadInput, co.PrefillChunk, co.BatchWait)
	}
	bs := o.BlockSize
	if bs == 0 {
		bs = m.Drafter.BlockSize()
	}
	// Passes run in the outer loop, every client count and mode inside each, so a slow spell of a shared
	// machine falls on all of them alike instead of on one count's figures.
	mems := make([][2]*speculative.PolicyMemory, len(co.Clients))
	runs := make([][2][]clientsRun, len(co.Clients))
	for k := range mems {
		mems[k] = [2]*speculative.PolicyMemory{speculative.NewPolicyMemory(), speculative.NewPolicyMemory()}
	}
	for pass := range o.Warmup + o.Repeats {
		for k, n := range co.Clients {
			for j, spec := range []bool{false, true} {
				r, err := runClients(ctx, m, o, co, n, spec, bs, mems[k][j], pass, &meta)
				if err != nil {
					return nil, meta, err
				}
				if pass >= o.Warmup {
					runs[k][j] = append(runs[k][j], r)
				}
			}
		}
	}
	rows := make([]BenchClientsRow, 0, len(co.Clients))
	for k, n := range co.Clients {
		row := BenchClientsRow{Clients: n, AR: summarise(runs[k][0]), Spec: summarise(runs[k][1])}
		row.Spec.BlockSize, row.Spec.Adaptive = bs, o.Adaptive
		if row.AR.TokensPerS > 0 {
			row.Speedup = row.Spec.TokensPerS / row.AR.TokensPerS
		}
		rows = append(rows, row)
	}
	if i := slices.IndexFunc(rows, func(r BenchClientsRow) bool { return r.Clients == 1 }); i >= 0 {
		solo := rows[i]
		for k := range rows {
			scale(&rows[k].AR, solo.AR)
			scale(&rows[k].Spec, solo.Spec)
		}
	}
	return rows, meta, nil
}

func scale(f *BenchClientsFigure, solo BenchClientsFigure) {
	if solo.TokensPerS > 0 {
		f.Scaling = f.TokensPerS / solo.TokensPerS
	}
	if solo.P50ITLMs > 0 {
		f.ITLRatio = f.P50ITLMs / solo.P50ITLMs
	}
}

// clientsRun is one pass of n concurrent clients.
type clientsRun struct {
	tokensPerS      float64
	p50, p95        []float64 // per client, ms
	tokens          int
	rounds, commits int
	batches, seqs   int
}

func runClients(ctx context.Context, m *models.Models, o BenchOptions, co ClientsOptions, n int, spec bool, bs int,
	mem *speculative.PolicyMemory, pass int, meta *BenchClientsMeta) (clientsRun, error) {
	var run clientsRun
	var mu sync.Mutex
	if !spec {
		bs = 1
	}
	sched, err := batch.New(batch.Config{MaxWait: co.BatchWait, Observe: func(r batch.Round) {
		if r.Kind == batch.RoundForward {
			mu.Lock()
			run.batches++
			run.seqs += r.Sequences
			mu.Unlock()
		}
	}}, SystemClock{}, m.Target, m.Drafter)
	if err != nil {
		return run, err
	}
	meta.BatchedForward, meta.BatchedDraft = sched.Batching()
	results := make([]decoded, n)
	itls := make([][]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			var last time.Time
			g := GenerateOptions{Request: generation.Request{Prompt: o.Prompts[i%len(o.Prompts)], MaxTokens: o.MaxTokens, StopIDs: o.StopIDs, NoEOS: o.NoEOS, BlockSize: bs, Adaptive: spec && o.Adaptive, PolicyMemory: mem, Sampling: o.Sampling, Seed: o.Seed + uint64(pass*n+i), Verify: o.Verify}, Speculative: spec, Batch: sched, PrefillChunk: co.PrefillChunk, Emit: func(toks []ports.Token) {
				now := time.Now()
				if !last.IsZero() && len(toks) > 0 {
					per := ms(now.Sub(last)) / float64(len(toks))
					for range toks {
						itls[i] = append(itls[i], per)
					}
				}
				last = now
			}}
			results[i], errs[i] = decode(ctx, m, g)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	for i := range n {
		if errs[i] != nil {
			return run, errs[i]
		}
		r := results[i]
		run.tokens += len(r.Tokens)
		for _, rs := range r.Stats.Rounds {
			if rs.Drafting() {
				run.rounds++
				run.commits += rs.Accepted + 1
			}
		}
		if len(itls[i]) > 0 {
			run.p50 = append(run.p50, percentile(itls[i], 0.50))
			run.p95 = append(run.p95, percentile(itls[i], 0.95))
		}
	}
	if wall > 0 {
		run.tokensPerS = float64(run.tokens) / wall.Seconds()
	}
	return run, nil
}

// summarise takes the medians over passes (latencies pooled over the passes' clients).
func summarise(runs []clientsRun) BenchClientsFigure {
	var f BenchClientsFigure
	var tps, p50, p95 []float64
	var rounds, commits, batches, seqs int
	for _, r := range runs {
		tps = append(tps, r.tokensPerS)
		p50 = append(p50, r.p50...)
		p95 = append(p95, r.p95...)
		f.Tokens += r.tokens
		rounds += r.rounds
		commits += r.commits
		batches += r.batches
		seqs += r.seqs
	}
	f.Runs = len(runs)
	f.TokensPerS = median(tps)
	f.P50ITLMs, f.P95ITLMs = median(p50), median(p95)
	if len(p95) > 0 {
		f.WorstP95ITLMs = slices.Max(p95)
	}
	if rounds > 0 {
		f.Tau = float64(commits) / float64(rounds)
	}
	if batches > 0 {
		f.MeanBatch = float64(seqs) / float64(batches)
	}
	return f
}

// percentile is the nearest-rank percentile q ∈ (0, 1] of x.
func percentile(x []float64, q float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	k := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}
