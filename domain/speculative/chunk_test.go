package speculative

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// TestPrefillChunks: a chunked prefill forwards at most PrefillChunk tokens at a time, still pauses at the
// prefill stops (Checkpoint sees exactly those), and generates exactly the unchunked prefill's tokens,
// greedy and seeded, with and without the drafter.
func TestPrefillChunks(t *testing.T) {
	for _, bs := range []int{1, 4} {
		for _, temp := range []float64{0, 0.8} {
			for _, chunk := range []int{1, 3, 7, 64} {
				t.Run(fmt.Sprintf("bs%d/T%g/chunk%d", bs, temp, chunk), func(t *testing.T) {
					var propose portfake.Proposer
					mcfg := portfake.Config{Tape: true}
					if bs > 1 {
						propose = portfake.MatchThenDiverge(portfake.MustNew(mcfg), 2)
					}
					prompt := testPrompt(20, 32)
					cfg := Config{BlockSize: bs, MaxTokens: 12, Sampling: ports.SamplingParams{Temperature: temp},
						Verify: VerifyMatch, PrefillStops: []int{5, 16}}
					run := func(cfg Config) (Result, rig, []int) {
						r := newRig(t, mcfg, propose, portfake.DrafterConfig{BlockSize: 4})
						var checkpoints []int
						cfg.Checkpoint = func(n int) error {
							require.Equal(t, n, r.sess.Len())
							checkpoints = append(checkpoints, n)
							return nil
						}
						dec, err := New(cfg, portfake.NewClock(time.Millisecond), portfake.NewRand(9))
						require.NoError(t, err)
						res, err := dec.Generate(t.Context(), r.sess, r.draftSession(), prompt, func([]ports.Token) error { return nil })
						require.NoError(t, err)
						return res, r, checkpoints
					}
					want, _, wantCP := run(cfg)
					cfg.PrefillChunk = chunk
					got, r, gotCP := run(cfg)
					assert.Equal(t, want.Tokens, got.Tokens)
					assert.Equal(t, wantCP, gotCP)
					pos := 0
					for _, c := range r.fake.Calls() {
						if c.Pos >= len(prompt) {
							break
						}
						assert.LessOrEqual(t, len(c.Tokens), chunk, "prefill forward at %d", c.Pos)
						assert.Equal(t, pos, c.Pos)
						pos += len(c.Tokens)
					}
					assert.Equal(t, len(prompt), pos, "the chunks cover the prompt")
				})
			}
		}
	}
	assert.ErrorContains(t, Config{BlockSize: 1, MaxTokens: 1, PrefillChunk: -1}.Validate(), "prefill chunk -1")
}
