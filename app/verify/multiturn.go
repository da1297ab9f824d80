package verify

import (
	"context"
	"fmt"
	"slices"

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
	cache, err := prefixcache.New(prefixcache.Config{Budget: o.CacheBytes, Every: o.Every}, SystemClock{})
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
		res.Turns = append(res.Turns, t)
		res.BlockSize = on.blockSize
		if i == len(users)-1 {
			res.TauLastOff, res.TauLastOn = tauOf(off), tauOf(on)
		}
		conv = append(conv, on.Tokens...)
	}
	res.CacheBytes = cache.Stats().Bytes
	return res, nil
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
