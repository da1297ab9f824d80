// Package pipeline runs one MLX model split across several processes: pipeline parallelism over MLX
// distributed, each process (rank) holding one stage of the layers. Load joins the group (the ring backend
// reads MLX_RANK and MLX_HOSTFILE, as mlx.launch sets them) and loads this rank's stage (an mlx.Target made
// with mlx.LoadStage); rank 0 serves the model (Node.Target: an ordinary ports.Target) with the drafter
// beside it (loaded on Node.MLX), pings an idle ring (Heartbeat) and stops the workers (Stop); every other
// rank runs Serve, performing rank 0's control messages on its own stage until told to stop.
//
// What runs where: the stage's forward passes — the residual stream, the workers' taps and the last rank's
// answers passed round the ring, batched rounds cut into micro-batches — are graph-level MLX work and live in
// adapters/mlx (stage.go, stagebatch.go), as does the performing of a control message (mlx.Worker); the wire
// protocol (control messages, acknowledgements, timeouts naming the lost rank, timings) is
// adapters/mlx/internal/ring, shared by both; this package joins the group and runs the processes.
//
// A lost rank is noticed by heartbeats beside the ring (ring.Beats: a TCP star with rank 0 at its centre,
// set up at the join; beats every tenth of RankTimeout (ring.BeatPeriod) from goroutines of their own, so
// they never wait for a round to end): a rank whose process dies is noticed at once (its sockets close), one that falls silent
// (a frozen or unplugged machine) within Options.RankTimeout, in the middle of a round or between rounds
// alike. The rank that notices fails its MLX runtime with ErrRankLost naming the lost rank (it wraps
// ports.ErrBackendLost: HTTP 503), which ends a round blocked in MLX's receive at once (MLX's recv cannot
// time out, and its ring never reports a broken socket) and every later call; rank 0 tells the other
// workers, which give up too. A rank that keeps beating is alive however long its round takes: only the
// round timeout (Options.Timeout, minutes) ends a round that never finishes on live ranks.
package pipeline

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// EnvRank and EnvHostfile are MLX's own conventions (mlx.launch sets them; the ring backend reads them):
// this process's rank and a JSON list, in rank order, of each rank's "ip:port" addresses.
const (
	EnvRank     = "MLX_RANK"
	EnvHostfile = "MLX_HOSTFILE"
)

// ErrRankLost is wrapped by every error of a distributed target after a rank stopped answering: MLX's
// receive cannot time out, so the MLX thread of rank 0 stays blocked and the process must be restarted.
// It wraps ports.ErrBackendLost, so in-flight and later requests fail with 503 and the error's text, which
// names the rank.
var ErrRankLost = ring.ErrRankLost

// Options configures a distributed target.
type Options struct {
	// Backend is MLX's distributed backend ("ring", "jaccl", "mpi"; "" lets MLX choose).
	Backend string
	// JoinTimeout bounds the wait for every rank to connect (0: one minute).
	JoinTimeout time.Duration
	// DrafterHead loads the LM head on rank 0 as well (beside the last rank's), for a DFlash drafter there:
	// the drafter shares the target's embedding and head, and the embedding is rank 0's already.
	DrafterHead bool
	// PingTimeout bounds a ping's round trip (0: ten seconds): a ping runs only while the pipeline is
	// idle, so it needs no room for a long prefill.
	PingTimeout time.Duration
	// Idle makes a worker give up when rank 0 has sent nothing for that long (0: wait for ever); rank 0
	// keeps an idle pipeline alive with Heartbeat at a shorter period.
	Idle time.Duration
	// Timeout bounds one round trip of the pipeline (a chunk's forward on every rank, or a control message
	// answered; 0: two minutes). A lost rank is noticed sooner, by RankTimeout: this bound is for live
	// ranks whose round never ends, so it leaves room for the longest prefill chunk on the slowest rank.
	Timeout time.Duration
	// RankTimeout is how long a rank may stay silent on the heartbeat channel before it is lost (0: ten
	// seconds). Rank 0's heartbeat address is its first address in MLX_HOSTFILE, which every worker must
	// reach.
	RankTimeout time.Duration
	// MicroBatchRows is the rows a micro-batch of a batched round aims at (0: 32): a round of R rows is cut
	// into min(ranks, ⌈R/MicroBatchRows⌉, its sequences) micro-batches of whole sequences, so rank k+1 runs
	// micro-batch i while rank k runs i+1. Each micro-batch reads the stage's weights again, so rounds of
	// few rows (decoding) pass whole: cutting them would cost every rank more than the overlap saves.
	MicroBatchRows int
}

// RankFromEnv reads MLX_RANK.
func RankFromEnv() (int, error) {
	r, err := strconv.Atoi(os.Getenv(EnvRank))
	if err != nil || r < 0 {
		return 0, fmt.Errorf("mlx distributed: %s=%q is not a rank (mlx.launch sets it)", EnvRank, os.Getenv(EnvRank))
	}
	return r, nil
}

// Stats is where a rank's forward rounds spent their time (see the fields).
type Stats = ring.Stats

// RankStats is one rank's stage, weights and Stats.
type RankStats struct {
	Rank        int   `json:"rank"`
	Lo          int   `json:"first_layer"`
	Hi          int   `json:"end_layer"`
	WeightBytes int64 `json:"weight_bytes"`
	Stats
}

// Node is this process's rank of a pipeline: its stage of the model and its place in the ring. Safe for
// concurrent use as its target is; Serve, Stop and Heartbeat are each called by one goroutine.
type Node struct {
	t     *mlx.Target
	p     *ring.Peer
	beats *ring.Beats
	log   zerolog.Logger
	// onCtrl, when set (tests), is called by a worker's loop after each control message it receives.
	onCtrl func()
}

// Load joins MLX distributed and loads this rank's stage of the target in dir: every rank computes the same
// split from the checkpoint's tensor sizes, so no rank reads another's layers. On rank 0 serve Target (and
// load the drafter on MLX); on the others call Serve.
func Load(ctx context.Context, dir string, opts mlx.LoadOptions, o Options) (*Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rt, err := mlxc.Open()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	p, beats, err := join(ctx, rt, o, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	t, err := mlx.LoadStage(ctx, dir, opts, p)
	if err != nil {
		beats.Close()
		return nil, fmt.Errorf("rank %d: %w", p.Rank, err)
	}
	st := p.Stage()
	opts.Logger.Info().Int("rank", p.Rank).Int("ranks", p.Size).Int("first_layer", st.Lo).
		Int("end_layer", st.Hi).Int64("weight_bytes", t.WeightBytes()).Msg("pipeline stage loaded")
	return &Node{t: t, p: p, beats: beats, log: opts.Logger}, nil
}

// join initialises MLX distributed and links the heartbeats within o.JoinTimeout: a rank that never joins
// fails every rank's load.
func join(ctx context.Context, rt *mlxc.Runtime, o Options, log zerolog.Logger) (*ring.Peer, *ring.Beats, error) {
	d := o.JoinTimeout
	if d <= 0 {
		d = time.Minute
	}
	host, err := rank0Host(os.Getenv(EnvHostfile))
	if err != nil {
		return nil, nil, err
	}
	// MLX's ring sends on plain sockets from its own threads: a send to a rank that died raises SIGPIPE,
	// which would end this process without a word. Ignored, the send fails with EPIPE instead, and the
	// round's timeout reports the lost rank.
	signal.Ignore(syscall.SIGPIPE)
	p := &ring.Peer{RT: rt, Timeout: o.Timeout, Head: o.DrafterHead, Idle: o.Idle, Ping: cmp.Or(o.PingTimeout, 10*time.Second),
		MicroRows: cmp.Or(o.MicroBatchRows, 32)}
	if p.Timeout <= 0 {
		p.Timeout = 2 * time.Minute
	}
	deadline := time.Now().Add(d)
	var hb heartbeatAddr
	err = rt.DoWithin(d, func() error {
		return fmt.Errorf("%w: not every rank joined within %v (hostfile %s)", ErrRankLost, d, os.Getenv(EnvHostfile))
	}, func() error {
		if !mlxc.DistributedAvailable(o.Backend) {
			return fmt.Errorf("%w: this libmlxc has no distributed backend %q", mlx.ErrUnavailable, o.Backend)
		}
		var bk *byte
		if o.Backend != "" {
			bk = mlxc.CString(o.Backend)
		}
		g := mlxc.DistributedGroupNew()
		if err := rt.Check(mlxc.DistributedInit(&g, true, bk)); err != nil {
			return fmt.Errorf("mlx distributed init: %w", err)
		}
		p.Group = g
		p.Rank, p.Size = int(mlxc.DistributedGroupRank(g)), int(mlxc.DistributedGroupSize(g))
		if p.Size < 2 {
			return nil
		}
		hb, err = shareHeartbeat(p, host)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if p.Size < 2 {
		return nil, nil, fmt.Errorf("mlx distributed: the group has %d rank; a pipeline needs 2 or more", p.Size)
	}
	bound := cmp.Or(o.RankTimeout, 10*time.Second)
	cfg := ring.BeatConfig{Bound: bound, OnLost: func(err error) {
		log.Error().Err(err).Int("rank", p.Rank).Msg("pipeline rank lost")
		rt.Fail(err)
	}}
	beats, err := linkBeats(ctx, p, hb, deadline, cfg)
	if err != nil {
		return nil, nil, err
	}
	return p, beats, nil
}

// rank0Host is rank 0's first address in the hostfile (a JSON list, in rank order, of each rank's "ip:port"
// addresses): where it listens for the workers' heartbeats.
func rank0Host(hostfile string) (string, error) {
	if hostfile == "" {
		return "", fmt.Errorf("mlx distributed: %s is not set (a JSON list of each rank's \"ip:port\" addresses, as mlx.launch writes; the heartbeats need rank 0's)", EnvHostfile)
	}
	b, err := os.ReadFile(hostfile)
	if err != nil {
		return "", fmt.Errorf("mlx distributed: %s: %w", EnvHostfile, err)
	}
	return parseRank0Host(b)
}

// parseRank0Host reads rank 0's first address's host from a hostfile's contents.
func parseRank0Host(b []byte) (string, error) {
	var hosts [][]string
	if err := json.Unmarshal(b, &hosts); err != nil {
		return "", fmt.Errorf("mlx distributed: %s is not a JSON list of each rank's \"ip:port\" addresses: %w", EnvHostfile, err)
	}
	if len(hosts) == 0 || len(hosts[0]) == 0 {
		return "", fmt.Errorf("mlx distributed: %s lists no address for rank 0", EnvHostfile)
	}
	host, _, err := net.SplitHostPort(hosts[0][0])
	if err != nil || host == "" {
		return "", fmt.Errorf("mlx distributed: %s: rank 0's address %q is not \"ip:port\"", EnvHostfile, hosts[0][0])
	}
	return host, nil
}

// heartbeatAddr is what rank 0 tells the workers at the join: its heartbeat port and the group's token
// (a random number a worker's hello must carry), and, on rank 0, the listener.
type heartbeatAddr struct {
	host  string
	port  int
	token uint64
	ln    net.Listener
}

// shareHeartbeat opens rank 0's heartbeat listener on host (any free port) and hands its port and a fresh
// token to every rank with one all_gather (MLX thread).
func shareHeartbeat(p *ring.Peer, host string) (heartbeatAddr, error) {
	hb := heartbeatAddr{host: host}
	vals := make([]int32, 3)
	if p.Rank == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return hb, fmt.Errorf("mlx distributed: heartbeat listener on rank 0's address %s: %w", host, err)
		}
		var tok [8]byte
		_, _ = rand.Read(tok[:]) // crypto/rand's Read never fails
		hb.ln, hb.token, hb.port = ln, binary.BigEndian.Uint64(tok[:]), ln.Addr().(*net.TCPAddr).Port
		vals = []int32{int32(hb.port), int32(hb.token >> 32), int32(uint32(hb.token))}
	}
	all, err := p.AllGather(vals)
	if err != nil {
		if hb.ln != nil {
			_ = hb.ln.Close()
		}
		return hb, fmt.Errorf("mlx distributed: heartbeat address: %w", err)
	}
	if len(all) != 3*p.Size {
		return hb, fmt.Errorf("mlx distributed: heartbeat address: gathered %d values, want %d", len(all), 3*p.Size)
	}
	hb.port, hb.token = int(all[0]), uint64(uint32(all[1]))<<32|uint64(uint32(all[2]))
	return hb, nil
}

// linkBeats links this rank's heartbeats before deadline: rank 0 takes every worker's hello, a worker
// dials rank 0.
func linkBeats(ctx context.Context, p *ring.Peer, hb heartbeatAddr, deadline time.Time, cfg ring.BeatConfig) (*ring.Beats, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if p.Rank == 0 {
		defer hb.ln.Close()
		b, err := ring.AcceptBeats(ctx, hb.ln, p.Size, hb.token, cfg)
		if err != nil {
			return nil, fmt.Errorf("mlx distributed: heartbeats: %w", err)
		}
		return b, nil
	}
	addr := net.JoinHostPort(hb.host, fmt.Sprint(hb.port))
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: heartbeat link to rank 0 at %s: %w", ErrRankLost, p.Rank, addr, err)
	}
	return ring.DialBeats(c, p.Rank, hb.token, cfg)
}

// MLX is this rank's stage as an MLX target: load rank 0's drafter on it.
func (n *Node) MLX() *mlx.Target { return n.t }

// Target is rank 0's view of the pipeline as the rest of higgs sees it (see port.go).
func (n *Node) Target() ports.Target { return pipelineTarget{n.t} }

// Rank is this process's rank.
func (n *Node) Rank() int { return n.p.Rank }

// Ranks is the pipeline's size.
func (n *Node) Ranks() int { return n.p.Size }

// Stage is the layers this process holds.
func (n *Node) Stage() model.Stage { return n.t.Stage() }

// WeightBytes is the memory the loaded weights hold on this process.
func (n *Node) WeightBytes() int64 { return n.t.WeightBytes() }

// Err is the error that broke the pipeline (wrapping ErrRankLost), or nil.
func (n *Node) Err() error { return n.t.Err() }

// Stats returns this rank's pipeline timings so far. Call it between operations, not during one.
func (n *Node) Stats() Stats {
	var st Stats
	_ = n.p.RT.Do(func() error { st = n.p.Stats; return nil })
	return st
}

// Close ends the heartbeats and frees this rank's weights (its sessions must be closed first).
func (n *Node) Close() error {
	n.beats.Close()
	return n.t.Close()
}
