package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds the special tokens a single sequence gets when add_special_tokens is true.
// A nil *postProcessor adds nothing (no post_processor, or ByteLevel, which only adjusts offsets).
type postProcessor struct {
	prefix, suffix []int32
}

func (p *postProcessor) apply(ids []int32) []int32 {
	if p == nil || (len(p.prefix) == 0 && len(p.suffix) == 0) {
		return ids
	}
	out := make([]int32, 0, len(p.prefix)+len(ids)+len(p.suffix))
	out = append(out, p.prefix...)
	out = append(out, ids...)
	return append(out, p.suffix...)
}

func parsePostProcessor(raw json.RawMessage) (*postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	p := &postProcessor{}
	if err := p.add(raw); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	return p, nil
}

func (p *postProcessor) add(raw json.RawMessage) error {
	kind, err := componentType(raw)
	if err != nil {
		return err
	}
	switch kind {
	case "ByteLevel":
		return nil
	case "Sequence":
		var seq struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return fmt.Errorf("Sequence: %w", err)
		}
		for i, sub := range seq.Processors {
			if err := p.add(sub); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
		return nil
	case "TemplateProcessing":
		return p.addTemplate(raw)
	default:
		return fmt.Errorf("type %q: %w", kind, ErrUnsupported)
	}
}

// addTemplate reads TemplateProcessing's "single" template: special tokens around sequence "A".
func (p *postProcessor) addTemplate(raw json.RawMessage) error {
	var tp struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &tp); err != nil {
		return fmt.Errorf("TemplateProcessing: %w", err)
	}
	if len(p.prefix) > 0 || len(p.suffix) > 0 {
		return fmt.Errorf("TemplateProcessing: more than one template: %w", ErrUnsupported)
	}
	seen := false
	for i, piece := range tp.Single {
		switch {
		case piece.Sequence != nil:
			if piece.Sequence.ID != "A" || seen {
				return fmt.Errorf("TemplateProcessing: single[%d] sequence %q: %w", i, piece.Sequence.ID, ErrUnsupported)
			}
			seen = true
		case piece.SpecialToken != nil:
			st, ok := tp.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return fmt.Errorf("TemplateProcessing: special token %q is not defined", piece.SpecialToken.ID)
			}
			if seen {
				p.suffix = append(p.suffix, st.IDs...)
			} else {
				p.prefix = append(p.prefix, st.IDs...)
			}
		default:
			return fmt.Errorf("TemplateProcessing: single[%d] is neither Sequence nor SpecialToken", i)
		}
	}
	if !seen {
		return fmt.Errorf("TemplateProcessing: single template has no sequence A")
	}
	return nil
}
