package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// envDistSpec names the JSON spec a re-executed test binary reads to run as one rank of a pipeline.
const envDistSpec = "HIGGS_MLX_DIST_SPEC"

type distSpec struct {
	Target, Drafter, Out string
	// Failure injection: rank DieRank (> 0) exits after DieAfter control messages (Freeze: stops with
	// SIGSTOP instead, as a hung machine; IdleLoss: a second after loading, while rank 0 sends nothing);
	// Timeout bounds the join and rank 0's rounds (0: 30 s; RoundTimeout, when set, the rounds);
	// RankTimeout is the heartbeats' bound (0: Options' default).
	DieRank, DieAfter     int
	Freeze, IdleLoss      bool
	Timeout, RoundTimeout time.Duration
	RankTimeout           time.Duration
	// Rank0Exits makes rank 0 exit once the pipeline is up; the workers, with Idle = Timeout, must give up.
	Rank0Exits bool
	// MicroRows is DistOptions.MicroBatchRows; Suite runs porttest.BatchSuite on rank 0 instead of the
	// decodes; Batched makes a DieRank run decode in batched rounds.
	MicroRows      int
	Suite, Batched bool
}

// distOutput is what each pipeline computes; the single-process run computes the same.
type distOutput struct {
	Greedy, Replay, Recompute, Seeded, Prefix []ports.Token
	// Batched are batchedDecode's sequences, BatchTaps the sums of their taps per round.
	Batched   [][]ports.Token
	BatchTaps []float64
	// Tree is treeDecode's sequence, TreeTaps the sums of the kept taps per round.
	Tree        []ports.Token
	TreeTaps    []float64
	WeightBytes int64
	Stage       [2]int
	Stats       Stats
	Ranks       []RankStats // rank 0: everyone's, gathered at Stop
	// Err and Elapsed are rank 0's failure and how long it took to see it (failure tests).
	Err     string
	Lost    bool
	Elapsed time.Duration
	// Broken is rank 0's Err() after the failure (what /health reports).
	Broken string
	// DiedAt is when a dying rank exited or froze, NoticedAt when rank 0 saw the loss (unix ns).
	DiedAt, NoticedAt int64
}

var distPrompt = []ports.Token{3, 17, 5, 42, 9, 11, 2, 30}

const distTokens = 14

// decodeAll runs every check of the pipeline tests on one target (distributed or not) and drafter.
// mt is the target as ports see it (Pipeline on rank 0).
func decodeAll(ctx context.Context, tgt staged, mt ports.Target, d ports.Drafter) (distOutput, error) {
	var out distOutput
	var err error
	if out.Greedy, err = porttest.Greedy(ctx, mt, distPrompt, distTokens); err != nil {
		return out, fmt.Errorf("greedy: %w", err)
	}
	if out.Replay, _, err = porttest.Speculate(ctx, mt, d, distPrompt, 4, porttest.RollbackReplay, distTokens); err != nil {
		return out, fmt.Errorf("speculate (replay): %w", err)
	}
	if out.Recompute, _, err = porttest.Speculate(ctx, mt, d, distPrompt, 4, porttest.RollbackRecompute, distTokens); err != nil {
		return out, fmt.Errorf("speculate (recompute): %w", err)
	}
	if out.Seeded, err = seededDecode(ctx, mt, distPrompt, distTokens, 7); err != nil {
		return out, fmt.Errorf("seeded: %w", err)
	}
	if out.Prefix, err = prefixDecode(ctx, mt, distPrompt, distTokens); err != nil {
		return out, fmt.Errorf("prefix: %w", err)
	}
	if out.Batched, out.BatchTaps, err = batchedDecode(ctx, mt, distTokens); err != nil {
		return out, fmt.Errorf("batched: %w", err)
	}
	if out.Tree, out.TreeTaps, err = treeDecode(ctx, mt, distPrompt, out.Greedy); err != nil {
		return out, fmt.Errorf("tree: %w", err)
	}
	out.WeightBytes = tgt.WeightBytes()
	st := tgt.Stage()
	out.Stage = [2]int{st.Lo, st.Hi}
	return out, nil
}

// treeDecode decodes len(greedy) tokens greedily by tree verification: each round verifies a tree hung
// from the last token, whose first child on each level is greedy's next token and the others are not (so
// rounds accept up to two drafts), keeps the accepted path and reads its taps. It returns the tokens and
// the sum of each round's kept taps.
func treeDecode(ctx context.Context, t ports.Target, prompt, greedy []ports.Token) ([]ports.Token, []float64, error) {
	sess, err := t.NewSession(ctx, []int{1, 3})
	if err != nil {
		return nil, nil, err
	}
	defer sess.Close()
	tv, ok := sess.(ports.TreeVerifier)
	if !ok {
		return nil, nil, fmt.Errorf("session %T verifies no trees", sess)
	}
	V := ports.Token(t.Info().VocabSize)
	first, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1})
	if err != nil {
		return nil, nil, err
	}
	out := []ports.Token{first.Greedy[0]}
	var sums []float64
	parents := []int{-1, 0, 0, 1, 1, 2, 2}
	for len(out) < len(greedy) {
		n := len(out)
		guess := func(k int) ports.Token { return greedy[min(n-1+k, len(greedy)-1)] }
		wrong := func(k int) ports.Token { return (guess(k) + ports.Token(k) + 5) % V }
		tokens := []ports.Token{out[n-1], guess(1), wrong(1), guess(2), wrong(2), wrong(3), wrong(4)}
		fr, err := tv.ForwardTree(ctx, tokens, parents, ports.ForwardOptions{Taps: true})
		if err != nil {
			return nil, nil, err
		}
		path := []int{0}
		for node := 0; ; {
			next := -1
			for c, p := range parents {
				if p == node && tokens[c] == fr.Greedy[node] {
					next = c
					break
				}
			}
			if next < 0 {
				break
			}
			node = next
			path = append(path, node)
		}
		last := path[len(path)-1]
		kept, err := tv.KeepPath(ctx, path)
		if err != nil {
			return nil, nil, err
		}
		rows, err := readTaps(kept)
		if err != nil {
			return nil, nil, err
		}
		var sum float64
		for _, r := range rows {
			for _, v := range r {
				sum += float64(v)
			}
		}
		sums = append(sums, sum)
		for _, node := range path[1:] {
			out = append(out, tokens[node])
		}
		out = append(out, fr.Greedy[last])
	}
	return out[:len(greedy)], sums, nil
}

// prefixDecode decodes greedily after importing the prompt's state, exported from another session one
// position short of the prompt (attention-only; the rest is recomputed) or at its end (hybrid, whose
// recurrent state exists only there): what the prefix cache does.
func prefixDecode(ctx context.Context, t ports.Target, prompt []ports.Token, n int) ([]ports.Token, error) {
	a, err := t.NewSession(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	first, err := a.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1})
	if err != nil {
		return nil, err
	}
	ps, err := a.(ports.PrefixExporter).ExportPrefix(len(prompt) - 1)
	if err != nil {
		if ps, err = a.(ports.PrefixExporter).ExportPrefix(len(prompt)); err != nil {
			return nil, err
		}
	}
	// The exporting session moves on; the state stays as exported.
	if _, err := a.Forward(ctx, []ports.Token{1, 2, 3}, ports.ForwardOptions{}); err != nil {
		return nil, err
	}
	b, err := t.NewSession(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := b.(ports.PrefixExporter).ImportPrefix(ps); err != nil {
		return nil, err
	}
	out := []ports.Token{first.Greedy[0]}
	if ps.Len() < len(prompt) {
		res, err := b.Forward(ctx, prompt[ps.Len():], ports.ForwardOptions{Rows: 1})
		if err != nil {
			return nil, err
		}
		out[0] = res.Greedy[0]
	}
	for len(out) < n {
		res, err := b.Forward(ctx, out[len(out)-1:], ports.ForwardOptions{})
		if err != nil {
			return nil, err
		}
		out = append(out, res.Greedy[0])
	}
	return out, nil
}

// seededDecode samples n tokens at temperature 0.9 from a PCG seeded with seed.
func seededDecode(ctx context.Context, t ports.Target, prompt []ports.Token, n int, seed uint64) ([]ports.Token, error) {
	sess, err := t.NewSession(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	opts := ports.ForwardOptions{Rows: 1, Sampling: &ports.SamplingParams{Temperature: 0.9}}
	block := prompt
	var out []ports.Token
	for len(out) < n {
		res, err := sess.Forward(ctx, block, opts)
		if err != nil {
			return nil, err
		}
		tok := res.Dists[0].Sample(rnd.Float64(), ports.NoToken)
		out = append(out, tok)
		block = []ports.Token{tok}
		opts.Rows = 0
	}
	return out, nil
}

// TestDistributedRank is one rank of TestDistributedPipeline's pipelines (the test binary re-executed with
// MLX_RANK, MLX_HOSTFILE and envDistSpec set); run directly it has nothing to do.
func TestDistributedRank(t *testing.T) {
	path := os.Getenv(envDistSpec)
	if path == "" {
		t.Skip("runs only as a rank of TestDistributedPipeline")
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var spec distSpec
	require.NoError(t, json.Unmarshal(b, &spec))
	ctx := t.Context()
	timeout := cmp.Or(spec.Timeout, 30*time.Second)
	start := time.Now()
	var idle time.Duration
	if spec.Rank0Exits {
		idle = timeout
	}
	tgt, err := Load(ctx, spec.Target, mlx.LoadOptions{}, Options{Backend: "ring", DrafterHead: true,
		JoinTimeout: timeout, Timeout: cmp.Or(spec.RoundTimeout, timeout), RankTimeout: spec.RankTimeout, Idle: idle,
		MicroBatchRows: spec.MicroRows})
	if spec.DieRank != 0 && err != nil {
		// A rank that never joins: rank 0 reports it within the join timeout.
		writeRankOutput(t, spec, 0, distOutput{Err: err.Error(), Lost: errors.Is(err, ErrRankLost), Elapsed: time.Since(start)})
		return
	}
	require.NoError(t, err)
	out := distOutput{WeightBytes: tgt.WeightBytes(), Stage: [2]int{tgt.Stage().Lo, tgt.Stage().Hi}}
	switch {
	case spec.Rank0Exits && tgt.Rank() == 0:
		require.NoError(t, tgt.Ping(ctx))
		os.Exit(3)
	case spec.Rank0Exits:
		start := time.Now()
		err := tgt.Serve(ctx)
		require.Error(t, err)
		out.Err, out.Lost, out.Elapsed = err.Error(), errors.Is(err, ErrRankLost), time.Since(start)
	case tgt.Rank() != 0 && tgt.Rank() == spec.DieRank && spec.IdleLoss:
		time.AfterFunc(time.Second, func() { die(t, spec) })
		_ = tgt.Serve(ctx)
	case tgt.Rank() != 0 && tgt.Rank() == spec.DieRank:
		dieAfter(t, tgt, spec)
	case tgt.Rank() == 0 && spec.IdleLoss:
		// Rank 0 sends nothing: the loss must come to it by the heartbeats alone.
		for tgt.Err() == nil && time.Since(start) < 2*time.Minute {
			time.Sleep(10 * time.Millisecond)
		}
		out.NoticedAt = time.Now().UnixNano()
		require.Error(t, tgt.Err())
		out.Err, out.Lost, out.Broken = tgt.Err().Error(), errors.Is(tgt.Err(), ErrRankLost), tgt.Err().Error()
		_, err = tgt.Target().NewSession(ctx, nil)
		require.ErrorIs(t, err, ErrRankLost, "a new request fails at once")
	case tgt.Rank() != 0 && spec.DieRank != 0:
		err := tgt.Serve(ctx)
		require.ErrorIs(t, err, ErrRankLost, "a worker whose neighbour died stops")
		return
	case tgt.Rank() != 0:
		require.NoError(t, tgt.Serve(ctx))
		out.Stats = tgt.Stats()
	case spec.DieRank != 0:
		// Decode until the dying rank's messages run out: rank 0 must fail, naming a lost rank, within the
		// timeout (plus the time the rounds before took).
		start := time.Now()
		var err error
		if spec.Batched {
			_, _, err = batchedDecode(ctx, tgt.Target(), 1000)
		} else {
			_, err = porttest.Greedy(ctx, tgt.Target(), distPrompt, 1000)
		}
		require.Error(t, err)
		out.NoticedAt = time.Now().UnixNano()
		out.Err, out.Lost, out.Elapsed = err.Error(), errors.Is(err, ErrRankLost), time.Since(start)
		if tgt.Err() != nil {
			out.Broken = tgt.Err().Error()
		}
		// Everything on the broken runtime fails at once from now on, and nothing hangs.
		_, err = tgt.Target().NewSession(ctx, nil)
		require.ErrorIs(t, err, ErrRankLost)
	case spec.Suite:
		d, err := mlx.LoadDrafter(ctx, spec.Drafter, tgt.MLX(), mlx.DrafterOptions{})
		require.NoError(t, err)
		porttest.BatchSuite{Target: tgt.Target(), Drafter: d, TapLayers: []int{3, 1}, ReadTaps: readTaps, Tolerance: batchTolerance}.Run(t)
		out.Stats = tgt.Stats()
		ranks, err := tgt.Stop()
		require.NoError(t, err)
		out.Ranks = ranks
	default:
		d, err := mlx.LoadDrafter(ctx, spec.Drafter, tgt.MLX(), mlx.DrafterOptions{})
		require.NoError(t, err)
		require.NoError(t, tgt.Ping(ctx))
		out, err = decodeAll(ctx, tgt, tgt.Target(), d)
		require.NoError(t, err)
		out.Stats = tgt.Stats()
		ranks, err := tgt.Stop()
		require.NoError(t, err)
		out.Ranks = ranks
	}
	writeRankOutput(t, spec, tgt.Rank(), out)
}

func writeRankOutput(t *testing.T, spec distSpec, rank int, out distOutput) {
	b, err := json.Marshal(out)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(fmt.Sprintf("%s.%d", spec.Out, rank), b, 0o644))
}

// dieAfter runs a worker's loop for spec.DieAfter control messages, then dies.
func dieAfter(t *testing.T, tgt *Node, spec distSpec) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	seen := 0
	tgt.onCtrl = func() {
		if seen++; seen > spec.DieAfter {
			die(t, spec)
		}
	}
	_ = tgt.Serve(ctx)
}

// die records the time, then exits the process as a crash would (its sockets close; rank 0 is told
// nothing) or, with spec.Freeze, stops it as a hung machine (its sockets stay open and silent; the test
// kills it once rank 0 is done).
func die(t *testing.T, spec distSpec) {
	b, err := json.Marshal(distOutput{DiedAt: time.Now().UnixNano()})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(spec.Out+".died", b, 0o644))
	if spec.Freeze {
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGSTOP))
		select {} // the stop lands on every thread soon after kill returns; nothing may run meanwhile
	}
	os.Exit(3)
}

// requireRing skips when the loaded MLX has no ring backend.
func requireRing(t *testing.T) {
	t.Helper()
	requireMLX(t)
	rt, err := mlxc.Open()
	require.NoError(t, err)
	var ok bool
	require.NoError(t, rt.Do(func() error { ok = mlxc.DistributedAvailable("ring"); return nil }))
	if !ok {
		t.Skip("this libmlxc has no MLX distributed ring backend")
	}
}

// freePorts reserves n loopback ports (closed again before the ranks bind them).
func freePorts(t *testing.T, n int) []int {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
	}
	return ports
}

// runPipeline starts n ranks of the test binary on 127.0.0.1 and returns each rank's output.
func runPipeline(t *testing.T, tdir, ddir string, n, microRows int) []distOutput {
	return runRanks(t, distSpec{Target: tdir, Drafter: ddir, MicroRows: microRows}, n, n)
}

// runRanks starts ranks 0..start−1 of an n-rank pipeline and returns the outputs of those that wrote one
// (a rank made to die writes none).
func runRanks(t *testing.T, s distSpec, n, start int) []distOutput {
	dir := t.TempDir()
	var hosts [][]string
	for _, p := range freePorts(t, n) {
		hosts = append(hosts, []string{fmt.Sprintf("127.0.0.1:%d", p)})
	}
	hb, err := json.Marshal(hosts)
	require.NoError(t, err)
	hostfile := filepath.Join(dir, "hosts.json")
	require.NoError(t, os.WriteFile(hostfile, hb, 0o644))
	s.Out = filepath.Join(dir, "out")
	sb, err := json.Marshal(s)
	require.NoError(t, err)
	spec := filepath.Join(dir, "spec.json")
	require.NoError(t, os.WriteFile(spec, sb, 0o644))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, start)
	for r := range start {
		c := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDistributedRank$", "-test.count=1")
		c.Env = append(os.Environ(), envDistSpec+"="+spec, EnvHostfile+"="+hostfile, fmt.Sprintf("%s=%d", EnvRank, r))
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		require.NoError(t, c.Start())
		cmds[r] = c
	}
	for r, c := range cmds {
		err := c.Wait()
		if r == 0 && s.Freeze && s.DieRank < start {
			_ = cmds[s.DieRank].Process.Kill() // frozen: it would never exit
		}
		switch {
		case s.Rank0Exits && r == 0:
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "rank 0 was to exit")
		case r == s.DieRank && s.DieRank != 0:
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "rank %d was to die", r)
		case r > 0 && s.DieRank != 0:
			// A surviving worker whose neighbour died stops too (its input's timeout); either way is fine.
		default:
			require.NoError(t, err, "rank %d", r)
		}
	}
	outs := make([]distOutput, start)
	for r := range start {
		b, err := os.ReadFile(fmt.Sprintf("%s.%d", s.Out, r))
		if (r > 0 && s.DieRank != 0) || (r == 0 && s.Rank0Exits) {
			continue
		}
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &outs[r]))
	}
	if b, err := os.ReadFile(s.Out + ".died"); err == nil {
		var died distOutput
		require.NoError(t, json.Unmarshal(b, &died))
		outs[s.DieRank].DiedAt = died.DiedAt
	}
	return outs
}

// TestDistributedRankLost: a worker that dies or freezes, mid-decode or while the pipeline is idle, gives
// rank 0 an error wrapping ErrRankLost (so ports.ErrBackendLost: HTTP 503) naming the rank, within the
// heartbeats' bound (RankTimeout) although a round may take minutes (RoundTimeout): a dead process at once
// (its sockets close), a frozen one after the bound and not before; the runtime stays broken (/health:
// degraded) and new requests fail at once. A worker that never joins fails the join; rank 0 exiting makes
// the workers give up.
func TestDistributedRankLost(t *testing.T) {
	requireRing(t)
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 93})
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 94, Taps: []int{1, 3}, Mask: 60})
	const (
		timeout    = 3 * time.Second // the join, and the never-joins case's bound
		bound      = 2 * time.Second // --rank-timeout
		round      = 2 * time.Minute // the production round timeout: never what notices a loss here
		slack      = time.Second     // a loaded test machine's scheduling
		dead, hung = "heartbeat connection to rank %d broke", "no heartbeat from rank %d within 2s"
	)
	tests := []struct {
		name                  string
		n, dieRank            int
		freeze, idle, batched bool
		want                  string
	}{
		{"dies mid-decode, 2 ranks", 2, 1, false, false, false, dead},
		{"middle rank dies, 3 ranks", 3, 1, false, false, false, dead},
		{"last rank dies, 3 ranks", 3, 2, false, false, false, dead},
		{"middle rank dies in a batched round, 3 ranks", 3, 1, false, false, true, dead},
		{"last rank dies in a batched round, 3 ranks", 3, 2, false, false, true, dead},
		{"freezes mid-decode, 2 ranks", 2, 1, true, false, false, hung},
		{"middle rank freezes in a batched round, 3 ranks", 3, 1, true, false, true, hung},
		{"dies while idle, 3 ranks", 3, 2, false, true, false, dead},
		{"freezes while idle, 3 ranks", 3, 1, true, true, false, hung},
	}
	t.Run("rank 0 exits, 3 ranks", func(t *testing.T) {
		outs := runRanks(t, distSpec{Target: tdir, Drafter: ddir, Rank0Exits: true, Timeout: timeout, RankTimeout: bound}, 3, 3)
		for r := 1; r < 3; r++ {
			t.Logf("rank %d: %s after %v", r, outs[r].Err, outs[r].Elapsed)
			assert.True(t, outs[r].Lost, "rank %d wraps ErrRankLost: %s", r, outs[r].Err)
			assert.Less(t, outs[r].Elapsed, bound+slack, "bounded by the heartbeats")
			assert.Contains(t, outs[r].Err, fmt.Sprintf("rank %d: heartbeat connection to rank 0 broke", r))
		}
	})
	t.Run("never joins", func(t *testing.T) {
		outs := runRanks(t, distSpec{Target: tdir, Drafter: ddir, DieRank: 1, Timeout: timeout, RankTimeout: bound}, 2, 1)
		t.Logf("rank 0: %s after %v", outs[0].Err, outs[0].Elapsed)
		assert.True(t, outs[0].Lost, "wraps ErrRankLost: %s", outs[0].Err)
		assert.Contains(t, outs[0].Err, "not every rank joined")
		assert.Less(t, outs[0].Elapsed, 2*timeout, "bounded by the join timeout")
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outs := runRanks(t, distSpec{Target: tdir, Drafter: ddir, DieRank: tc.dieRank, DieAfter: 20, Freeze: tc.freeze,
				IdleLoss: tc.idle, Batched: tc.batched, MicroRows: 1, Timeout: timeout, RoundTimeout: round, RankTimeout: bound}, tc.n, tc.n)
			got := outs[0]
			require.NotZero(t, outs[tc.dieRank].DiedAt, "rank %d died", tc.dieRank)
			took := time.Duration(got.NoticedAt - outs[tc.dieRank].DiedAt)
			t.Logf("rank 0: %s, %v after rank %d died", got.Err, took, tc.dieRank)
			assert.True(t, got.Lost, "wraps ErrRankLost: %s", got.Err)
			assert.Contains(t, got.Err, fmt.Sprintf(tc.want, tc.dieRank), "names the lost rank")
			assert.Less(t, took, bound+slack, "noticed within the heartbeats' bound")
			if tc.freeze {
				// Its last beat came up to a period (bound/10) before it froze; it is lost once silent for
				// the bound less a period.
				assert.Greater(t, took, bound*8/10-slack/10, "a silent rank gets nearly the whole bound")
			}
			assert.Contains(t, got.Broken, fmt.Sprintf(tc.want, tc.dieRank), "the runtime stays broken with the same error (/health: degraded)")
		})
	}
}

// TestDistributedPipeline: a target split over 2 and 3 processes (MLX's ring backend on 127.0.0.1) decodes
// token for token what it decodes in one process — greedy, speculative with the DFlash drafter on rank 0
// (both rollbacks) and seeded sampling — on a dense and a hybrid target; every rank holds only its slice.
func TestDistributedPipeline(t *testing.T) {
	requireRing(t)
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			tdir := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 91})
			ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 92, Taps: []int{1, 3}, Mask: 60})
			tgt, err := mlx.Load(t.Context(), tdir, mlx.LoadOptions{})
			require.NoError(t, err)
			defer tgt.Close()
			d, err := mlx.LoadDrafter(t.Context(), ddir, tgt, mlx.DrafterOptions{})
			require.NoError(t, err)
			defer d.Close()
			want, err := decodeAll(t.Context(), tgt, tgt, d)
			require.NoError(t, err)
			assert.Equal(t, want.Greedy, want.Replay, "speculation is lossless in one process")
			assert.Equal(t, want.Greedy, want.Prefix, "an imported prefix continues as the session would")
			assert.Equal(t, want.Greedy, want.Tree, "tree verification is lossless in one process")
			assert.Less(t, len(want.TreeTaps), distTokens/2, "tree rounds accept drafts (%d rounds for %d tokens)", len(want.TreeTaps), distTokens)
			wantSolo, soloTaps := soloDecodes(t, tgt)
			assert.Equal(t, wantSolo, want.Batched, "batched rounds equal each sequence's solo decode in one process")
			// Rounds pass the ring whole (2 ranks) and in micro-batches (3 ranks, one sequence each).
			for _, c := range []struct{ n, microRows int }{{2, 0}, {3, 1}} {
				n := c.n
				t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
					outs := runPipeline(t, tdir, ddir, n, c.microRows)
					got := outs[0]
					assert.Equal(t, want.Batched, got.Batched, "batched rounds")
					if c.microRows == 1 {
						// Micro-batches of one sequence each run each item's rows alone: bit for bit the
						// solo forwards (MLX's products may round differently with the rows beside them).
						assert.Equal(t, soloTaps, got.BatchTaps, "micro-batched rounds' taps")
					} else {
						assert.Equal(t, want.BatchTaps, got.BatchTaps, "batched rounds' taps")
					}
					assert.Equal(t, want.Greedy, got.Greedy, "greedy")
					assert.Equal(t, want.Replay, got.Replay, "speculative, tape replay")
					assert.Equal(t, want.Recompute, got.Recompute, "speculative, snapshot + recompute")
					assert.Equal(t, want.Seeded, got.Seeded, "seeded sampling")
					assert.Equal(t, want.Prefix, got.Prefix, "prefix export and import")
					assert.Equal(t, want.Tree, got.Tree, "tree verification")
					assert.Equal(t, want.TreeTaps, got.TreeTaps, "tree verification's kept taps")
					var sum int64
					for r, o := range outs {
						t.Logf("rank %d: layers [%d,%d), %d weight bytes of %d; %d forwards: compute %v, wait %v, send %v", r,
							o.Stage[0], o.Stage[1], o.WeightBytes, want.WeightBytes, o.Stats.Forwards, o.Stats.Compute, o.Stats.Wait, o.Stats.Send)
						assert.Positive(t, o.Stats.Forwards, "rank %d ran the rounds", r)
						assert.Positive(t, o.Stats.Batches, "rank %d ran the batched rounds", r)
						if c.microRows == 1 {
							assert.Greater(t, o.Stats.MicroBatches, o.Stats.Batches, "rank %d cut its rounds into micro-batches", r)
						} else {
							assert.Equal(t, o.Stats.Batches, o.Stats.MicroBatches, "rank %d ran its rounds whole", r)
						}
						require.Len(t, got.Ranks, n)
						assert.Equal(t, RankStats{Rank: r, Lo: o.Stage[0], Hi: o.Stage[1], WeightBytes: o.WeightBytes, Stats: o.Stats}, got.Ranks[r],
							"rank 0 gathered rank %d's figures", r)
						assert.Less(t, o.WeightBytes, want.WeightBytes, "rank %d holds only its slice", r)
						sum += o.WeightBytes
					}
					assert.GreaterOrEqual(t, sum, want.WeightBytes, "every weight is on some rank")
				})
			}
		})
	}
}

// batchPrompts are batchedDecode's sequences (ragged): the first is distPrompt.
var batchPrompts = [][]ports.Token{distPrompt, {4, 8, 15, 16, 23}, {1, 2, 3, 5, 8, 13, 21, 34, 55, 6, 7}}

// batchedDecode decodes batchPrompts together, one ForwardBatch per round (the prompts' prefill first),
// for n tokens each: the first two greedily (the second recording tapes), the third sampled at temperature
// 0.9 from its own PCG as seededDecode does, every item with taps; it returns the sequences and the sum of
// each round's taps.
func batchedDecode(ctx context.Context, t ports.Target, n int) ([][]ports.Token, []float64, error) {
	bf, ok := t.(ports.BatchForwarder)
	if !ok {
		return nil, nil, errors.New("the target has no batched forward")
	}
	return lockstepDecode(ctx, t, n, bf.ForwardBatch)
}

// soloForward runs a round's items one Forward after another.
func soloForward(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	out := make([]ports.BatchResult, len(items))
	for i, it := range items {
		r, err := it.Session.Forward(ctx, it.Tokens, it.Opts)
		if err != nil {
			return nil, err
		}
		out[i].Result = r
	}
	return out, nil
}

// lockstepDecode is batchedDecode with each round run by fwd.
func lockstepDecode(ctx context.Context, t ports.Target, n int, fwd func(context.Context, []ports.BatchItem) ([]ports.BatchResult, error)) ([][]ports.Token, []float64, error) {
	sessions := make([]ports.Session, len(batchPrompts))
	for i := range sessions {
		s, err := t.NewSession(ctx, []int{1, 3})
		if err != nil {
			return nil, nil, err
		}
		defer s.Close()
		sessions[i] = s
	}
	rnd := rand.New(rand.NewPCG(7, 8))
	out := make([][]ports.Token, len(batchPrompts))
	var sums []float64
	for len(out[0]) < n {
		items := make([]ports.BatchItem, len(sessions))
		for i, s := range sessions {
			block := batchPrompts[i]
			if len(out[i]) > 0 {
				block = out[i][len(out[i])-1:]
			}
			opts := ports.ForwardOptions{Rows: 1, Taps: true, RecordTape: i == 1}
			if i == 2 {
				opts.Sampling = &ports.SamplingParams{Temperature: 0.9}
			}
			items[i] = ports.BatchItem{Session: s, Tokens: block, Opts: opts}
		}
		res, err := fwd(ctx, items)
		if err != nil {
			return nil, nil, err
		}
		var sum float64
		for i, r := range res {
			if r.Err != nil {
				return nil, nil, fmt.Errorf("sequence %d: %w", i, r.Err)
			}
			tok := r.Result.Greedy[0]
			if i == 2 {
				tok = r.Result.Dists[0].Sample(rnd.Float64(), ports.NoToken)
			}
			out[i] = append(out[i], tok)
			rows, err := readTaps(r.Result.Taps)
			if err != nil {
				return nil, nil, err
			}
			for _, row := range rows {
				for _, v := range row {
					sum += float64(v)
				}
			}
		}
		sums = append(sums, sum)
	}
	return out, sums, nil
}

// soloDecodes is what batchedDecode's sequences decode alone, one Forward at a time, and the sums of their
// taps in batchedDecode's rounds (every item run alone).
func soloDecodes(t *testing.T, tg ports.Target) ([][]ports.Token, []float64) {
	t.Helper()
	var out [][]ports.Token
	for _, p := range batchPrompts[:2] {
		g, err := porttest.Greedy(t.Context(), tg, p, distTokens)
		require.NoError(t, err)
		out = append(out, g)
	}
	s, err := seededDecode(t.Context(), tg, batchPrompts[2], distTokens, 7)
	require.NoError(t, err)
	out = append(out, s)
	lock, sums, err := lockstepDecode(t.Context(), tg, distTokens, soloForward)
	require.NoError(t, err)
	require.Equal(t, out, lock, "the lockstep solo decode is the solo decodes")
	return out, sums
}

// TestDistributedBatchSuite: the batched-forward and batched-draft conformance suite on rank 0 of a
// hybrid target split over 3 processes, every round cut into micro-batches: each item equals its solo
// call through the same pipeline within the single-process suite's tolerance (a micro-batch of several
// sequences rounds like a batched round in one process: MLX's products depend on the rows beside them).
func TestDistributedBatchSuite(t *testing.T) {
	requireRing(t)
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 95})
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 96, Taps: []int{1, 3}, Mask: 60})
	outs := runRanks(t, distSpec{Target: tdir, Drafter: ddir, Suite: true, MicroRows: 1}, 3, 3)
	for r, o := range outs[0].Ranks {
		t.Logf("rank %d: %d batched rounds in %d micro-batches: compute %v, wait %v, send %v", r, o.Batches, o.MicroBatches, o.BatchCompute, o.BatchWait, o.BatchSend)
		assert.Greater(t, o.MicroBatches, o.Batches, "rank %d cut rounds into micro-batches", r)
	}
}
