package serve

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// FallbackMaxTokens is the output limit of a request without max_tokens when neither the operator
// (ServeConfig.DefaultMaxTokens) nor the model's generation config names one: long enough for a real
// answer, short enough that an SDK's first call, which sets none, returns in seconds.
const FallbackMaxTokens = 1024

var _ ports.PromptTokenizer = (*Serve)(nil)

// Models lists the served model (none while loading), with what it runs with.
func (s *Serve) Models() []ports.ModelCard {
	l := s.engine.Load()
	if l == nil {
		return nil
	}
	c := ports.ModelCard{ID: l.name, Created: l.Created, OwnedBy: "higgs", Backend: l.Backend, Kernels: l.Kernels,
		ContextLength: l.info.ContextLength, DefaultMaxTokens: l.maxTokens, BlockSize: l.gen.DefaultBlockSize(),
		Certified: l.Certified}
	switch {
	case l.Drafter == nil || c.BlockSize <= 1:
		c.Speculation = ports.SpeculationOff
	case s.cfg.Adaptive:
		c.Speculation = ports.SpeculationAdaptive
	default:
		c.Speculation = ports.SpeculationFixed
	}
	if l.Drafter != nil {
		c.Drafter = &ports.DrafterCard{Name: l.DrafterName, Generation: l.DrafterGeneration, BlockSize: l.gen.DrafterBlockSize()}
	}
	return []ports.ModelCard{c}
}

// limits applies the configured context length and works out the default output limit of l.
func (s *Serve) limits(l *loaded) error {
	if n := s.cfg.ContextLength; n > 0 {
		if own := l.info.ContextLength; own > 0 && n > own {
			return fmt.Errorf("--context-length %d exceeds the model's context length of %d tokens", n, own)
		}
		l.info.ContextLength = n
		l.gen.ContextLength = n
	}
	switch n := s.cfg.DefaultMaxTokens; {
	case n > 0:
		l.maxTokens = n
	case n < 0:
		l.maxTokens = 0
	case l.MaxNewTokens > 0:
		l.maxTokens = l.MaxNewTokens
	default:
		l.maxTokens = FallbackMaxTokens
	}
	return nil
}

// requestMaxTokens is the output limit of a request that asked for asked tokens (0: none named): the default, within
// the room the context leaves after a prompt of promptLen tokens (a prompt that fills the context keeps 0,
// and the plan says why it cannot run).
func (l *loaded) requestMaxTokens(asked, promptLen int) int {
	if asked != 0 || l.maxTokens == 0 {
		return asked
	}
	if n := l.info.ContextLength; n > 0 {
		return min(l.maxTokens, max(n-promptLen, 0))
	}
	return l.maxTokens
}

// Tokenize returns the ids req's prompt is prefilled with (ports.PromptTokenizer): the same rendering and
// encoding Generate uses, checked as CountTokens checks them.
func (s *Serve) Tokenize(_ context.Context, req ports.GenerateRequest, addSpecial bool) (ports.Tokenized, error) {
	l, err := s.engineFor(req.Model, "tokenize")
	if err != nil {
		return ports.Tokenized{}, err
	}
	var ids []ports.Token
	if req.Messages == nil && req.Prompt != "" && !addSpecial {
		enc, ok := l.Tokenizer.(interface {
			EncodeWith(text string, addSpecialTokens bool) []ports.Token
		})
		if !ok {
			return ports.Tokenized{}, invalid("add_special_tokens", "this model's tokenizer cannot leave out its special tokens")
		}
		ids = enc.EncodeWith(req.Prompt, false)
	} else {
		var errs []error
		if ids, _, errs = s.encodePrompt(l, req); len(errs) > 0 {
			return ports.Tokenized{}, errors.Join(errs...)
		}
	}
	if ids == nil {
		ids = []ports.Token{}
	}
	return ports.Tokenized{Tokens: ids, MaxModelLen: l.info.ContextLength}, nil
}

// Detokenize returns the text of ids, special tokens included (ports.PromptTokenizer).
func (s *Serve) Detokenize(_ context.Context, model string, ids []ports.Token) (string, error) {
	l, err := s.engineFor(model, "detokenize")
	if err != nil {
		return "", err
	}
	if n := l.Tokenizer.VocabSize(); n > 0 {
		for i, id := range ids {
			if id < 0 || int(id) >= n {
				return "", invalid("tokens", "tokens[%d] = %d is outside this model's vocabulary of %d", i, id, n)
			}
		}
	}
	text, err := l.Tokenizer.Decode(ids, false)
	if err != nil {
		return "", invalid("tokens", "%v", err)
	}
	return text, nil
}

// engineFor is the loaded engine serving model ("": the default) for op.
func (s *Serve) engineFor(model, op string) (*loaded, error) {
	l := s.engine.Load()
	if l == nil {
		return nil, fmt.Errorf("%s: %w", op, ports.ErrNotReady)
	}
	if model != "" && model != l.name {
		return nil, fmt.Errorf("%w: the model %q does not exist; this server serves %q", ports.ErrUnknownModel, model, l.name)
	}
	return l, nil
}

// backendCard splits LoadModels' backend name into the model card's backend and kernels.
func backendCard(backend string) (name, kernels string) {
	switch backend {
	case models.BackendCPUFast:
		return models.BackendCPU, models.KernelsFast
	case models.BackendCPU:
		return models.BackendCPU, models.KernelsExact
	}
	return backend, ""
}

// servedDrafterName names a drafter directory as the model card shows it: the hub id of a snapshot in the
// Hugging Face cache (…/models--ORG--NAME/snapshots/REV: ORG/NAME), NAME/drafter for the bundled layout,
// else the directory's base name.
func servedDrafterName(dir string) string {
	if dir == "" {
		return ""
	}
	clean := filepath.Clean(dir)
	base, parent := filepath.Base(clean), filepath.Dir(clean)
	if filepath.Base(parent) == "snapshots" {
		if repo := filepath.Base(filepath.Dir(parent)); strings.HasPrefix(repo, "models--") {
			return strings.ReplaceAll(strings.TrimPrefix(repo, "models--"), "--", "/")
		}
	}
	if base == "drafter" {
		return filepath.Base(parent) + "/" + base
	}
	return base
}
