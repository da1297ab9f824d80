package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/prefixstore"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/ports"
)

// MultiTurnOptions configure bench's multi-turn scenario: a conversation of Turns turns opening with a
// SystemTokens-token system prompt, each turn's prompt the whole conversation so far plus the next user
// turn, decoded speculatively with the prefix cache off and on, turn by turn.
type MultiTurnOptions struct {
	Turns, SystemTokens int
	// CacheBytes and Every configure the cache of the "on" side (as --prefix-cache-bytes/-every do).
	CacheBytes int64
	Every      int
	// DiskDir, when set, adds a third side, the disk tier after a restart: before each turn the cache-on
	// side's entries are flushed to a disk tier in a fresh directory under DiskDir (removed afterwards), and a
	// new cache opened over it — its memory empty, as after a restart — runs the turn. DiskBytes is that
	// tier's budget.
	DiskDir   string
	DiskBytes int64
}

// MultiTurnTurn is one turn's figures.
type MultiTurnTurn struct {
	Turn         int `json:"turn"`
	PromptTokens int `json:"prompt_tokens"`
	// CachedTokens is what the "on" side restored from the cache.
	CachedTokens int `json:"cached_tokens"`
	// TTFTMsOff and TTFTMsOn are the times to the first token (sessions opened, prefix restored, prompt
	// prefilled) without and with the cache; Ratio is Off/On.
	TTFTMsOff float64 `json:"ttft_ms_off"`
	TTFTMsOn  float64 `json:"ttft_ms_on"`
	Ratio     float64 `json:"ttft_ratio"`
	// Same reports that both sides generated the same tokens (greedy decoding is exact with the cache).
	Same bool `json:"same_output"`
	// With a disk side: what it restored, its time to first token, TTFTMsOff over it, and whether it generated
	// the cache-off side's tokens.
	DiskCachedTokens int     `json:"disk_cached_tokens,omitempty"`
	TTFTMsDisk       float64 `json:"ttft_ms_disk,omitempty"`
	DiskRatio        float64 `json:"ttft_ratio_disk,omitempty"`
	DiskSame         *bool   `json:"disk_same_output,omitempty"`
}

// MultiTurnResult is bench's "multi_turn" object.
type MultiTurnResult struct {
	Turns        []MultiTurnTurn `json:"turns"`
	SystemTokens int             `json:"system_tokens"`
	MaxTokens    int             `json:"max_tokens"`
	BlockSize    int             `json:"block_size"`
	// TauLastOff and TauLastOn are τ of the last turn without and with the cache.
	TauLastOff float64 `json:"tau_last_off"`
	TauLastOn  float64 `json:"tau_last_on"`
	// CacheBytes is the cache's size after the last turn.
	CacheBytes int64 `json:"cache_bytes"`
	// With a disk side: the disk tier's bytes after the last turn, and the bytes per cached token of its longest
	// record (file size over tokens: the target's and drafter's states, the token ids and the header).
	DiskBytes         int64   `json:"disk_bytes,omitempty"`
	DiskBytesPerToken float64 `json:"disk_bytes_per_token,omitempty"`
}

// multiTurnPrompts are the system prompt (SystemTokens tokens cut from the prompts, cycled) and the user
// turns (the prompts, cycled).
func multiTurnPrompts(prompts [][]ports.Token, o MultiTurnOptions) ([]ports.Token, [][]ports.Token) {
	var sys []ports.Token
	for i := 0; len(sys) < o.SystemTokens; i++ {
		sys = append(sys, prompts[i%len(prompts)]...)
	}
	users := make([][]ports.Token, o.Turns)
	for i := range users {
		users[i] = prompts[i%len(prompts)]
	}
	return sys[:o.SystemTokens], users
}

// MultiTurn runs the multi-turn scenario (greedy, the drafter's or o's block size, after one warm-up
// generation): per turn, the cache-off and cache-on sides run back to back on the same prompt; the
// conversation continues with the cache-on side's answer.
func MultiTurn(ctx context.Context, m *models.Models, bo BenchOptions, o MultiTurnOptions) (MultiTurnResult, error) {
	res := MultiTurnResult{SystemTokens: o.SystemTokens, MaxTokens: bo.MaxTokens}
	switch {
	case o.Turns < 1 || o.SystemTokens < 1:
		return res, fmt.Errorf("%w: --turns %d and --system-tokens %d must be ≥ 1", ErrBadInput, o.Turns, o.SystemTokens)
	case len(bo.Prompts) == 0 || slices.ContainsFunc(bo.Prompts, func(p []ports.Token) bool { return len(p) == 0 }):
		return res, fmt.Errorf("%w: the multi-turn scenario needs non-empty prompts", ErrBadInput)
	case m.Drafter == nil:
		return res, fmt.Errorf("%w: bench needs a drafter (--draft DIR)", ErrBadInput)
	}
	pc := prefixcache.Config{Budget: o.CacheBytes, Every: o.Every}
	var dc *prefixcache.DiskConfig
	var diskErrs []error
	var mu sync.Mutex
	if o.DiskDir != "" {
		d, cleanup, err := benchDisk(m, o)
		if err != nil {
			return res, err
		}
		defer cleanup()
		// A bench whose disk tier failed measured something else: its problems end the run.
		d.OnError = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			diskErrs = append(diskErrs, err)
		}
		dc = &d
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(diskErrs) > 0 {
			return fmt.Errorf("bench --multi-turn: the disk tier: %w", errors.Join(diskErrs...))
		}
		return nil
	}
	var cache *prefixcache.Cache
	var err error
	if dc != nil {
		cache, err = prefixcache.Open(ctx, pc, SystemClock{}, *dc)
	} else {
		cache, err = prefixcache.New(pc, SystemClock{})
	}
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	sys, users := multiTurnPrompts(bo.Prompts, o)
	gen := func(prompt []ports.Token, c *prefixcache.Cache) (decoded, error) {
		return decode(ctx, m, GenerateOptions{Request: generation.Request{Prompt: prompt, MaxTokens: bo.MaxTokens, BlockSize: bo.BlockSize, StopIDs: bo.StopIDs, NoEOS: bo.NoEOS}, Speculative: true, PrefixCache: c})
	}
	if _, err := gen(users[0], nil); err != nil { // warm-up
		return res, err
	}
	conv := slices.Clone(sys)
	for i, u := range users {
		conv = append(conv, u...)
		if ctxLen := m.Target.Info().ContextLength; ctxLen > 0 && len(conv)+bo.MaxTokens > ctxLen {
			return res, fmt.Errorf("%w: turn %d needs %d positions, more than the context length %d (lower --system-tokens, --turns or --max-tokens)",
				ErrBadInput, i+1, len(conv)+bo.MaxTokens, ctxLen)
		}
		var disk *decoded
		if dc != nil {
			// The restart: what the cache-on side holds goes to disk, and a cache with an empty memory reads it.
			if _, err := cache.Flush(ctx); err != nil {
				return res, err
			}
			restarted, err := prefixcache.Open(ctx, pc, SystemClock{}, *dc)
			if err != nil {
				return res, err
			}
			d, err := gen(conv, restarted)
			if err != nil {
				return res, err
			}
			disk = &d
			if err := failed(); err != nil {
				return res, err
			}
		}
		off, err := gen(conv, nil)
		if err != nil {
			return res, err
		}
		on, err := gen(conv, cache)
		if err != nil {
			return res, err
		}
		t := MultiTurnTurn{Turn: i + 1, PromptTokens: len(conv), CachedTokens: on.Cached,
			TTFTMsOff: ms(off.FirstToken), TTFTMsOn: ms(on.FirstToken), Same: slices.Equal(off.Tokens, on.Tokens)}
		if t.TTFTMsOn > 0 {
			t.Ratio = t.TTFTMsOff / t.TTFTMsOn
		}
		if disk != nil {
			same := slices.Equal(off.Tokens, disk.Tokens)
			t.DiskCachedTokens, t.TTFTMsDisk, t.DiskSame = disk.Cached, ms(disk.FirstToken), &same
			if t.TTFTMsDisk > 0 {
				t.DiskRatio = t.TTFTMsOff / t.TTFTMsDisk
			}
		}
		res.Turns = append(res.Turns, t)
		res.BlockSize = on.blockSize
		if i == len(users)-1 {
			res.TauLastOff, res.TauLastOn = tauOf(off), tauOf(on)
		}
		conv = append(conv, on.Tokens...)
	}
	res.CacheBytes = cache.Stats().Bytes
	if dc != nil {
		if _, err := cache.Flush(ctx); err != nil {
			return res, err
		}
		if err := failed(); err != nil {
			return res, err
		}
		infos, err := dc.Store.List(ctx)
		if err != nil {
			return res, err
		}
		longest := 0
		for _, in := range infos {
			res.DiskBytes += in.Bytes
			if len(in.Tokens) > longest {
				longest = len(in.Tokens)
				res.DiskBytesPerToken = float64(in.Bytes) / float64(len(in.Tokens))
			}
		}
	}
	return res, nil
}

// benchDisk is the disk side's tier: a fresh directory under o.DiskDir, removed by cleanup.
func benchDisk(m *models.Models, o MultiTurnOptions) (prefixcache.DiskConfig, func(), error) {
	tc, ok := m.Target.(ports.PrefixCodec)
	var dcodec ports.PrefixCodec
	if ok && m.Drafter != nil {
		dcodec, ok = m.Drafter.(ports.PrefixCodec)
	}
	if !ok {
		return prefixcache.DiskConfig{}, nil, fmt.Errorf("%w: --prefix-cache-dir: the %s backend cannot write its prefix states to disk", ErrBadInput, m.Backend)
	}
	if o.DiskBytes <= 0 {
		return prefixcache.DiskConfig{}, nil, fmt.Errorf("%w: --prefix-cache-disk-bytes %d must be > 0", ErrBadInput, o.DiskBytes)
	}
	id := models.Identity(m)
	if id == "" {
		return prefixcache.DiskConfig{}, nil, fmt.Errorf("%w: --prefix-cache-dir: the model's identity is unknown", ErrBadInput)
	}
	if err := os.MkdirAll(o.DiskDir, 0o700); err != nil {
		return prefixcache.DiskConfig{}, nil, fmt.Errorf("--prefix-cache-dir: %w", err)
	}
	dir, err := os.MkdirTemp(o.DiskDir, "bench-")
	if err != nil {
		return prefixcache.DiskConfig{}, nil, fmt.Errorf("--prefix-cache-dir: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	store, err := prefixstore.Open(dir, id, zerolog.Nop(), prefixstore.Options{})
	if err != nil {
		cleanup()
		return prefixcache.DiskConfig{}, nil, err
	}
	return prefixcache.DiskConfig{Store: store, Target: tc, Draft: dcodec, Budget: o.DiskBytes}, cleanup, nil
}

func tauOf(d decoded) float64 {
	rounds, committed := 0, 0
	for _, rs := range d.Stats.Rounds {
		if rs.BlockSize > 1 {
			rounds++
			committed += rs.Accepted + 1
		}
	}
	if rounds == 0 {
		return 0
	}
	return float64(committed) / float64(rounds)
}
