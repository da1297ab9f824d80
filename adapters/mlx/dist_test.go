package mlx

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
}

// distOutput is what each pipeline computes; the single-process run computes the same.
type distOutput struct {
	Greedy, Replay, Recompute, Seeded []ports.Token
	WeightBytes                       int64
	Stage                             [2]int
}

var distPrompt = []ports.Token{3, 17, 5, 42, 9, 11, 2, 30}

const distTokens = 14

// decodeAll runs every check of the pipeline tests on one target (distributed or not) and drafter.
func decodeAll(ctx context.Context, tgt *Target, d ports.Drafter) (distOutput, error) {
	var out distOutput
	var err error
	if out.Greedy, err = porttest.Greedy(ctx, tgt, distPrompt, distTokens); err != nil {
		return out, fmt.Errorf("greedy: %w", err)
	}
	if out.Replay, _, err = porttest.Speculate(ctx, tgt, d, distPrompt, 4, porttest.RollbackReplay, distTokens); err != nil {
		return out, fmt.Errorf("speculate (replay): %w", err)
	}
	if out.Recompute, _, err = porttest.Speculate(ctx, tgt, d, distPrompt, 4, porttest.RollbackRecompute, distTokens); err != nil {
		return out, fmt.Errorf("speculate (recompute): %w", err)
	}
	if out.Seeded, err = seededDecode(ctx, tgt, distPrompt, distTokens, 7); err != nil {
		return out, fmt.Errorf("seeded: %w", err)
	}
	out.WeightBytes = tgt.WeightBytes()
	st := tgt.Stage()
	out.Stage = [2]int{st.Lo, st.Hi}
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
	tgt, err := LoadDistributed(ctx, spec.Target, LoadOptions{}, DistOptions{Backend: "ring", DrafterHead: true,
		JoinTimeout: 30 * time.Second, Timeout: 30 * time.Second})
	require.NoError(t, err)
	out := distOutput{WeightBytes: tgt.WeightBytes(), Stage: [2]int{tgt.Stage().Lo, tgt.Stage().Hi}}
	if tgt.Rank() != 0 {
		require.NoError(t, tgt.Serve(ctx))
	} else {
		d, err := LoadDrafter(ctx, spec.Drafter, tgt, DrafterOptions{})
		require.NoError(t, err)
		require.NoError(t, tgt.Ping(ctx))
		out, err = decodeAll(ctx, tgt, d)
		require.NoError(t, err)
		require.NoError(t, tgt.Stop())
	}
	b, err = json.Marshal(out)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(fmt.Sprintf("%s.%d", spec.Out, tgt.Rank()), b, 0o644))
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
func runPipeline(t *testing.T, tdir, ddir string, n int) []distOutput {
	dir := t.TempDir()
	var hosts [][]string
	for _, p := range freePorts(t, n) {
		hosts = append(hosts, []string{fmt.Sprintf("127.0.0.1:%d", p)})
	}
	hb, err := json.Marshal(hosts)
	require.NoError(t, err)
	hostfile := filepath.Join(dir, "hosts.json")
	require.NoError(t, os.WriteFile(hostfile, hb, 0o644))
	sb, err := json.Marshal(distSpec{Target: tdir, Drafter: ddir, Out: filepath.Join(dir, "out")})
	require.NoError(t, err)
	spec := filepath.Join(dir, "spec.json")
	require.NoError(t, os.WriteFile(spec, sb, 0o644))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		c := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDistributedRank$", "-test.count=1")
		c.Env = append(os.Environ(), envDistSpec+"="+spec, EnvHostfile+"="+hostfile, fmt.Sprintf("%s=%d", EnvRank, r))
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		require.NoError(t, c.Start())
		cmds[r] = c
	}
	for r, c := range cmds {
		require.NoError(t, c.Wait(), "rank %d", r)
	}
	outs := make([]distOutput, n)
	for r := range n {
		b, err := os.ReadFile(fmt.Sprintf("%s.%d", filepath.Join(dir, "out"), r))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &outs[r]))
	}
	return outs
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
			tgt, err := Load(t.Context(), tdir, LoadOptions{})
			require.NoError(t, err)
			defer tgt.Close()
			d, err := LoadDrafter(t.Context(), ddir, tgt, DrafterOptions{})
			require.NoError(t, err)
			defer d.Close()
			want, err := decodeAll(t.Context(), tgt, d)
			require.NoError(t, err)
			assert.Equal(t, want.Greedy, want.Replay, "speculation is lossless in one process")
			for _, n := range []int{2, 3} {
				t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
					outs := runPipeline(t, tdir, ddir, n)
					got := outs[0]
					assert.Equal(t, want.Greedy, got.Greedy, "greedy")
					assert.Equal(t, want.Replay, got.Replay, "speculative, tape replay")
					assert.Equal(t, want.Recompute, got.Recompute, "speculative, snapshot + recompute")
					assert.Equal(t, want.Seeded, got.Seeded, "seeded sampling")
					var sum int64
					for r, o := range outs {
						t.Logf("rank %d: layers [%d,%d), %d weight bytes of %d", r, o.Stage[0], o.Stage[1], o.WeightBytes, want.WeightBytes)
						assert.Less(t, o.WeightBytes, want.WeightBytes, "rank %d holds only its slice", r)
						sum += o.WeightBytes
					}
					assert.GreaterOrEqual(t, sum, want.WeightBytes, "every weight is on some rank")
				})
			}
		})
	}
}
