package serve

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// requestLog is a generation request's one info-level log line, written when the request ends however it
// ends: id, model, prompt / cached / completion tokens, time to first token, tokens/s, τ, the policy's mode
// and the finish ("stop", "length", or why it produced nothing: "invalid", "busy", "not_ready",
// "cancelled", "error").
type requestLog struct {
	s     *Serve
	id    string
	model string
	start time.Time
	// live is the generation's live view once it runs (nil for a request refused before): its first
	// committed token times the first token.
	live *live
}

func (s *Serve) startRequestLog(id string, l *loaded, req ports.GenerateRequest) *requestLog {
	model := req.Model
	if model == "" && l != nil {
		model = l.name
	}
	return &requestLog{s: s, id: id, model: model, start: s.clock.Now()}
}

// done writes the line for a request that returned res and err under ctx.
func (rl *requestLog) done(ctx context.Context, res ports.GenerateResult, err error) {
	ev := rl.s.log.Info()
	if !ev.Enabled() {
		return
	}
	now := rl.s.clock.Now()
	ev.Str("id", rl.id).Str("model", rl.model).Int("prompt_tokens", res.PromptTokens).
		Int("cached_tokens", res.CachedTokens).Int("completion_tokens", res.CompletionTokens)
	if lv := rl.live; lv != nil && !lv.firstToken.IsZero() {
		ev.Dur("ttft", lv.firstToken.Sub(rl.start))
		// The rate after the first token, as the client received the rest (batching and queueing included).
		if d := now.Sub(lv.firstToken); res.CompletionTokens > 1 && d > 0 {
			ev.Float64("tokens_per_s", round(float64(res.CompletionTokens-1)/d.Seconds(), 1))
		}
	}
	if res.Spec.Tau > 0 {
		ev.Float64("tau", round(res.Spec.Tau, 2))
	}
	if res.Spec.Policy != nil {
		ev.Str("policy", res.Spec.Policy.Mode)
	}
	ev.Str("finish", finishOf(ctx, res, err)).Dur("duration", now.Sub(rl.start))
	if err != nil && ctx.Err() == nil {
		ev.Str("error", err.Error())
	}
	ev.Msg("request")
}

// finishOf is the log's finish: the result's, or why there is none.
func finishOf(ctx context.Context, res ports.GenerateResult, err error) string {
	switch {
	case err == nil:
		return res.FinishReason
	case ctx.Err() != nil:
		return "cancelled"
	case errors.Is(err, ports.ErrInvalidRequest), errors.Is(err, ports.ErrUnknownModel):
		return "invalid"
	case errors.Is(err, ports.ErrBusy):
		return "busy"
	case errors.Is(err, ports.ErrNotReady):
		return "not_ready"
	}
	return "error"
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
