package speculative

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// Decoder runs generations with one configuration. It holds no per-generation state, so one Decoder may
// serve sequential generations; it is not safe for concurrent use because the injected Rand is not.
type Decoder struct {
	cfg   Config
	clock ports.Clock
	rnd   ports.Rand
}

// New validates cfg and returns a Decoder. rnd may be nil when cfg.Sampling is greedy.
func New(cfg Config, clock ports.Clock, rnd ports.Rand) (*Decoder, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if clock == nil {
		errs = append(errs, errors.New("nil clock"))
	}
	if rnd == nil && !cfg.Sampling.Greedy() {
		errs = append(errs, fmt.Errorf("temperature %v needs a random source", cfg.Sampling.Temperature))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("speculative config: %w", err)
	}
	cfg.StopTokens = append([]ports.Token(nil), cfg.StopTokens...)
	cfg.LayerKinds = append([]ports.LayerKind(nil), cfg.LayerKinds...)
	return &Decoder{cfg: cfg, clock: clock, rnd: rnd}, nil
}

// Generate prefills prompt into sess (which must be empty, opened with the drafter's tap layers when draft
// != nil), then decodes. draft == nil or BlockSize == 1 means autoregressive decoding. emit receives each
// round's committed tokens (already committed to the session) in order; an emit error stops generation and
// is returned wrapped. ctx is checked once per round; on cancellation Generate returns ctx.Err() (wrapped)
// plus the partial Result with FinishCancelled. draft must be empty (Len 0); the caller keeps ownership of
// sess and draft and closes them.
func (d *Decoder) Generate(ctx context.Context, sess ports.Session, draft ports.DraftSession,
	prompt []ports.Token, emit func([]ports.Token) error) (Result, error) {
	return Result{}, errors.New("speculative: Generate is being implemented")
}
