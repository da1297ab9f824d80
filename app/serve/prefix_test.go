package serve

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// cpuEngine is a real CPU target (and DFlash drafter) of the fake tokenizer's vocabulary, with the
// one-character-per-token tokenizer, so text round-trips to the same ids and a test can aim at a cache entry.
func cpuEngine(t *testing.T, family string, tmpl ports.ChatTemplate) Engine {
	t.Helper()
	tg, err := cpu.Load(t.Context(), testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 21, Vocab: srvModelVocab}), cpu.LoadOptions{Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	d, err := cpu.LoadDrafter(t.Context(), testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 22, Taps: []int{0, 2}, Mask: 61, BlockSize: 4, Vocab: srvModelVocab}), tg, cpu.DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return Engine{Target: tg, Drafter: d, Tokenizer: srvTokenizer{}, Template: tmpl, EOS: []ports.Token{srvEOS}, Name: "cpu"}
}

func newServeWith(t *testing.T, e Engine, cacheBytes int64, every int) *Serve {
	t.Helper()
	s, err := NewServe(ServeConfig{MaxConcurrency: 2, QueueSize: 8, PrefixCacheBytes: cacheBytes, PrefixCacheEvery: every}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(e))
	return s
}

func gen(t *testing.T, s *Serve, req ports.GenerateRequest) ports.GenerateResult {
	t.Helper()
	res, err := s.Generate(t.Context(), req, nil)
	require.NoError(t, err)
	return res
}

// dropFirstOfEarlier renders like srvTemplate but drops the first character of every assistant turn but the
// last, as Qwen3's template drops the reasoning of earlier turns: the next turn's prompt differs from what
// was generated inside the earlier answer.
type dropFirstOfEarlier struct{}

func (dropFirstOfEarlier) Render(msgs []ports.ChatMessage, opts ports.ChatOptions) (string, error) {
	var sb strings.Builder
	for _, m := range msgs {
		c := m.Content
		if m.Role == "assistant" && len(c) > 0 {
			c = c[1:]
		}
		fmt.Fprintf(&sb, "[%s]: %s\n", m.Role, c)
	}
	if opts.AddGenerationPrompt {
		sb.WriteString("[assistant]: ")
	}
	return sb.String(), nil
}

// TestPrefixCacheExact: with the cache on, every request's output equals the output with the cache off,
// greedy and seeded at T > 0, on a dense and a hybrid CPU target, with and without the drafter, for hits at a
// prompt's end, at a generation's end and mid-prompt; and a template that renders an earlier turn
// differently misses there, hitting only where the token ids agree.
func TestPrefixCacheExact(t *testing.T) {
	families := []string{"qwen3", "qwen3_next"}
	if testing.Short() {
		families = families[1:]
	}
	seed := uint64(11)
	for _, fam := range families {
		for _, bs := range []int{1, 4} {
			for _, temp := range []float64{0, 0.9} {
				t.Run(fmt.Sprintf("%s/bs%d/T%g", fam, bs, temp), func(t *testing.T) {
					for _, tmpl := range []ports.ChatTemplate{srvTemplate{}, dropFirstOfEarlier{}} {
						e := cpuEngine(t, fam, tmpl)
						on, off := newServeWith(t, e, 64<<20, 8), newServeWith(t, e, 0, 0)
						req := func(msgs ...ports.ChatMessage) ports.GenerateRequest {
							return ports.GenerateRequest{Messages: msgs, MaxTokens: 12, BlockSize: bs, Seed: &seed,
								Sampling: ports.SamplingParams{Temperature: temp}}
						}
						both := func(r ports.GenerateRequest) ports.GenerateResult {
							want, got := gen(t, off, r), gen(t, on, r)
							assert.Equal(t, want.Content, got.Content, "the cache changes nothing")
							assert.Equal(t, want.CompletionTokens, got.CompletionTokens)
							assert.Zero(t, want.CachedTokens)
							return got
						}
						sys := ports.ChatMessage{Role: "system", Content: "You are a terse helper for the prefix cache test"}
						u1 := ports.ChatMessage{Role: "user", Content: "hello there"}
						first := both(req(sys, u1))
						assert.Zero(t, first.CachedTokens, "a cold cache misses")
						// Every entry so far is a prefix of the first request's generation end: the prompt and
						// the answer but its last token (after a stop token, which is not in the content, the
						// whole answer).
						render := func(msgs ...ports.ChatMessage) []ports.Token {
							text, err := tmpl.Render(msgs, ports.ChatOptions{AddGenerationPrompt: true})
							require.NoError(t, err)
							return srvTokens(text)
						}
						seq := append(render(sys, u1), srvTokens(first.Content)...)
						if first.FinishReason == "length" {
							seq = seq[:len(seq)-1]
						}
						// want is the reuse the cache must find for prompt: a hybrid target restores whole
						// entries (the 8-token boundaries, the prompt's end, the generation's end); a dense one
						// the true common prefix with any entry, cut where the prompt leaves it.
						want := func(prompt []ports.Token, hybridWant int) int {
							if fam != "qwen3" {
								return hybridWant
							}
							n := 0
							for n < len(prompt) && n < len(seq) && prompt[n] == seq[n] {
								n++
							}
							return min(n, len(prompt)-1)
						}
						p1 := first.PromptTokens

						// Resending the same conversation hits the last boundary before the prompt's end.
						again := both(req(sys, u1))
						assert.Equal(t, want(render(sys, u1), (p1-1)/8*8), again.CachedTokens, "the same prompt")

						// The next turn: with an exact template the generation's end is reused, otherwise the
						// earlier prompt's end, where the earlier answer's render first differs (a hybrid target
						// has no state past it).
						a1 := ports.ChatMessage{Role: "assistant", Content: first.Content}
						u2 := ports.ChatMessage{Role: "user", Content: "and again"}
						second := both(req(sys, u1, a1, u2))
						p2 := render(sys, u1, a1, u2)
						if _, exact := tmpl.(srvTemplate); exact {
							assert.Equal(t, len(seq), second.CachedTokens, "the next turn reuses the generation's end")
						} else {
							assert.Equal(t, want(p2, p1), second.CachedTokens, "the hit stops at the true common prefix")
							assert.Less(t, second.CachedTokens, p1+len(srvTokens(first.Content))-1, "never the stale generation end")
						}

						// A mid-prompt hit: a prompt sharing only the system line.
						u3 := ports.ChatMessage{Role: "user", Content: "something else entirely"}
						other := both(req(sys, u3))
						common := len("[system]: " + sys.Content + "\n[user]: ")
						assert.Equal(t, want(render(sys, u3), common/8*8), other.CachedTokens, "mid-prompt")
					}
				})
			}
		}
	}
}

// TestPrefixCacheBudgetUnderConcurrency: concurrent requests on a small budget never push the cache above
// it, and every answer still equals the cache-off answer.
func TestPrefixCacheBudgetUnderConcurrency(t *testing.T) {
	e := cpuEngine(t, "qwen3_next", srvTemplate{})
	const budget = 200 << 10
	on, off := newServeWith(t, e, budget, 4), newServeWith(t, e, 0, 0)
	prompts := []string{"abc abc abc abc", "abc abc abd", "abc xyz", "hello world hello", "hello wor"}
	want := map[string]string{}
	for _, p := range prompts {
		want[p] = gen(t, off, ports.GenerateRequest{Prompt: p, MaxTokens: 8, BlockSize: 4}).Content
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				p := prompts[(g+i)%len(prompts)]
				res, err := on.Generate(context.Background(), ports.GenerateRequest{Prompt: p, MaxTokens: 8, BlockSize: 4}, nil)
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, want[p], res.Content, p)
				st := on.PrefixCacheStats()
				assert.LessOrEqual(t, st.Bytes, int64(budget))
			}
		}()
	}
	wg.Wait()
	st := on.PrefixCacheStats()
	assert.Positive(t, st.Hits)
	assert.Positive(t, st.Evictions, "the budget is small enough to evict")
	assert.LessOrEqual(t, st.Bytes, int64(budget))
	t.Logf("prefix cache: %+v", st)
}

// TestPrefixCacheCancelledPrefillLeavesNoEntry: a request cancelled half-way through its prefill (after a
// checkpoint exported state) caches nothing, and the next request is served as if it never ran.
func TestPrefixCacheCancelledPrefillLeavesNoEntry(t *testing.T) {
	e := cpuEngine(t, "qwen3_next", srvTemplate{})
	ref := gen(t, newServeWith(t, e, 0, 0), ports.GenerateRequest{Prompt: "abcdefghijklmnop", MaxTokens: 8})
	ctx, cancel := context.WithCancel(t.Context())
	e.Target = cancelTarget{Target: e.Target, cancel: cancel}
	on := newServeWith(t, e, 64<<20, 4)
	_, err := on.Generate(ctx, ports.GenerateRequest{Prompt: "abcdefghijklmnop", MaxTokens: 8}, nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, on.PrefixCacheStats().Entries, "a cancelled request leaves no entry")
	res := gen(t, on, ports.GenerateRequest{Prompt: "abcdefghijklmnop", MaxTokens: 8})
	assert.Zero(t, res.CachedTokens)
	assert.Equal(t, ref.Content, res.Content)
	assert.Positive(t, on.PrefixCacheStats().Entries)
	again := gen(t, on, ports.GenerateRequest{Prompt: "abcdefghijklmnop", MaxTokens: 8})
	assert.Equal(t, 12, again.CachedTokens)
	assert.Equal(t, ref.Content, again.Content)
}

// cancelTarget's first session cancels its request at its second Forward: inside the prefill, after the
// first checkpoint.
type cancelTarget struct {
	ports.Target
	cancel context.CancelFunc
	once   *sync.Once
}

func (c cancelTarget) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := c.Target.NewSession(ctx, taps)
	if err != nil {
		return nil, err
	}
	return &cancelSession{Session: s, PrefixExporter: s.(ports.PrefixExporter), cancel: c.cancel}, nil
}

type cancelSession struct {
	ports.Session
	ports.PrefixExporter
	forwards int
	cancel   context.CancelFunc
}

func (s *cancelSession) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	s.forwards++
	if s.forwards == 2 {
		s.cancel()
	}
	return s.Session.Forward(ctx, tokens, opts)
}

// TestPrefixCacheUsageThroughSDK: the official OpenAI SDK reads usage.prompt_tokens_details.cached_tokens on
// both APIs, in the final stream chunk too.
func TestPrefixCacheUsageThroughSDK(t *testing.T) {
	e := cpuEngine(t, "qwen3_next", srvTemplate{})
	s := newServeWith(t, e, 64<<20, 8)
	srv := httptest.NewServer(oaiapi.New(s, oaiapi.Options{Log: zerolog.Nop()}))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	p := openai.ChatCompletionNewParams{Model: "cpu", Messages: userMsg("tell me about prefix caches"),
		MaxTokens: openai.Int(6), Temperature: openai.Float(0)}
	first, err := client.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	assert.Zero(t, first.Usage.PromptTokensDetails.CachedTokens)
	second, err := client.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	assert.Equal(t, (first.Usage.PromptTokens-1)/8*8, second.Usage.PromptTokensDetails.CachedTokens)
	assert.Equal(t, first.Choices[0].Message.Content, second.Choices[0].Message.Content)

	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), p)
	var last openai.ChatCompletionChunk
	for stream.Next() {
		last = stream.Current()
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, second.Usage.PromptTokensDetails.CachedTokens, last.Usage.PromptTokensDetails.CachedTokens)

	comp, err := client.Completions.New(t.Context(), openai.CompletionNewParams{Model: "cpu",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("[user]: tell me about prefix caches\n[assistant]: ")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0)})
	require.NoError(t, err)
	assert.Equal(t, second.Usage.PromptTokensDetails.CachedTokens, comp.Usage.PromptTokensDetails.CachedTokens)
	assert.Equal(t, first.Choices[0].Message.Content, comp.Choices[0].Text)
}
