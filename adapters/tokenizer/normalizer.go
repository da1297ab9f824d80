package tokenizer

import (
	"encoding/json"
	"fmt"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization. A nil *normalizer does nothing.
type normalizer struct {
	forms []norm.Form
}

func (n *normalizer) apply(s string) string {
	if n == nil {
		return s
	}
	for _, f := range n.forms {
		// IsNormalString is a fast check that avoids copying already-normalized text.
		if !f.IsNormalString(s) {
			s = f.String(s)
		}
	}
	return s
}

func parseNormalizer(raw json.RawMessage) (*normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	n := &normalizer{}
	if err := n.add(raw); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if len(n.forms) == 0 {
		return nil, nil
	}
	return n, nil
}

func (n *normalizer) add(raw json.RawMessage) error {
	kind, err := componentType(raw)
	if err != nil {
		return err
	}
	switch kind {
	case "NFC":
		n.forms = append(n.forms, norm.NFC)
	case "NFD":
		n.forms = append(n.forms, norm.NFD)
	case "NFKC":
		n.forms = append(n.forms, norm.NFKC)
	case "NFKD":
		n.forms = append(n.forms, norm.NFKD)
	case "Sequence":
		var seq struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return fmt.Errorf("Sequence: %w", err)
		}
		for i, sub := range seq.Normalizers {
			if err := n.add(sub); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
	default:
		return fmt.Errorf("type %q: %w", kind, ErrUnsupported)
	}
	return nil
}
