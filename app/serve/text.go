package serve

import (
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// textPipe turns committed tokens into streamed text: stream-decode, cut at stop strings, split reasoning.
// Each stage holds back only what a later token could still change.
type textPipe struct {
	dec       ports.StreamDecoder
	stop      stopMatcher
	think     *thinkSplitter
	eos       map[ports.Token]bool
	emit      func(ports.GenerateEvent) error
	content   strings.Builder
	reasoning strings.Builder
	stopped   bool
	// lp carries the tokens' log-probabilities along with their text; nil unless the request asked.
	lp *logprobText
}

func newTextPipe(dec ports.StreamDecoder, stops []string, think, inThink bool, eos map[ports.Token]bool,
	emit func(ports.GenerateEvent) error) *textPipe {
	p := &textPipe{dec: dec, stop: stopMatcher{stops: stops}, eos: eos, emit: emit}
	if think {
		p.think = &thinkSplitter{inThink: inThink, trimNL: inThink}
	}
	return p
}

// push is the decoder's emit callback. It returns errStopString once a stop string has appeared.
func (p *textPipe) push(ids []ports.Token) error { return p.pushLogprobs(ids, nil) }

// pushLogprobs is push with the tokens' log-probabilities (lps[i] is ids[i]'s; nil unless p.lp is set).
func (p *textPipe) pushLogprobs(ids []ports.Token, lps []ports.TokenLogprob) error {
	if p.stopped {
		return errStopString
	}
	var sb strings.Builder
	for i, id := range ids {
		if p.eos[id] {
			// A stop token ends generation; it is never text.
			continue
		}
		s, err := p.dec.Push(id)
		if err != nil {
			return err
		}
		if p.lp != nil {
			if i >= len(lps) {
				return fmt.Errorf("text: %d log-probabilities for %d tokens", len(lps), len(ids))
			}
			if err := p.lp.add(lps[i], s); err != nil {
				return err
			}
		}
		sb.WriteString(s)
	}
	out, hit := p.stop.feed(sb.String())
	if p.lp != nil {
		p.lp.release(len(out), hit)
	}
	if err := p.send(out, false); err != nil {
		return err
	}
	if hit {
		p.stopped = true
		return errStopString
	}
	return nil
}

// finish flushes everything still held back (at the end of a generation that did not hit a stop string).
func (p *textPipe) finish() error {
	if p.stopped {
		return p.send("", true)
	}
	out, hit := p.stop.feed(p.dec.Flush())
	if p.lp != nil {
		p.lp.release(len(out), hit)
		if !hit {
			p.lp.flush() // the rest of the text is released below
		}
	}
	if !hit {
		out += p.stop.flush()
	}
	return p.send(out, true)
}

func (p *textPipe) send(text string, final bool) error {
	var ev ports.GenerateEvent
	if p.think == nil {
		ev.Content = text
	} else {
		ev = p.think.feed(text, final)
	}
	if p.lp != nil {
		ev.Logprobs, p.lp.ready = p.lp.ready, nil
	}
	if ev.Content == "" && ev.Reasoning == "" && len(ev.Logprobs) == 0 {
		return nil
	}
	p.content.WriteString(ev.Content)
	p.reasoning.WriteString(ev.Reasoning)
	if p.emit == nil {
		return nil
	}
	return p.emit(ev)
}

// stopMatcher finds stop strings across token boundaries. It releases text as soon as no stop string can
// start inside it, and never releases a stop string or what follows it.
type stopMatcher struct {
	stops   []string
	pending string
	// hit is the stop string found (the earliest in the text; the first listed on a tie), "" before one is.
	hit string
}

// feed adds s and returns the text that is final. hit reports that a stop string was found; the returned
// text then ends right before it, and everything after is dropped.
func (m *stopMatcher) feed(s string) (out string, hit bool) {
	if len(m.stops) == 0 {
		return s, false
	}
	m.pending += s
	at := -1
	for _, st := range m.stops {
		if i := strings.Index(m.pending, st); i >= 0 && (at < 0 || i < at) {
			at, m.hit = i, st
		}
	}
	if at >= 0 {
		out = m.pending[:at]
		m.pending = ""
		return out, true
	}
	hold := holdBack(m.pending, m.stops)
	out = m.pending[:len(m.pending)-hold]
	m.pending = m.pending[len(m.pending)-hold:]
	return out, false
}

func (m *stopMatcher) flush() string {
	out := m.pending
	m.pending = ""
	return out
}

// holdBack returns the length of the longest suffix of s that is a proper prefix of one of pats.
func holdBack(s string, pats []string) int {
	best := 0
	for _, p := range pats {
		for n := min(len(p)-1, len(s)); n > best; n-- {
			if strings.HasSuffix(s, p[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// thinkSplitter routes text inside <think>…</think> to Reasoning. An opening tag is recognised only before
// any answer text, and there is one reasoning block per answer (as Qwen3's templates produce); newlines right
// after a tag are dropped so the answer does not start with the template's blank lines.
type thinkSplitter struct {
	inThink bool
	done    bool // the reasoning block has closed (or answer text began): no more tags
	trimNL  bool
	pending string
}

func (t *thinkSplitter) feed(s string, final bool) ports.GenerateEvent {
	var ev ports.GenerateEvent
	t.pending += s
	for t.pending != "" {
		if t.trimNL {
			t.pending = strings.TrimLeft(t.pending, "\r\n")
			if t.pending == "" {
				break
			}
			t.trimNL = false
		}
		switch {
		case t.inThink:
			if i := strings.Index(t.pending, thinkClose); i >= 0 {
				ev.Reasoning += t.pending[:i]
				t.pending = t.pending[i+len(thinkClose):]
				t.inThink, t.done, t.trimNL = false, true, true
				continue
			}
			hold := 0
			if !final {
				hold = holdBack(t.pending, []string{thinkClose})
			}
			ev.Reasoning += t.pending[:len(t.pending)-hold]
			t.pending = t.pending[len(t.pending)-hold:]
			return ev
		case !t.done:
			lead := len(t.pending) - len(strings.TrimLeft(t.pending, " \t\r\n"))
			rest := t.pending[lead:]
			if strings.HasPrefix(rest, thinkOpen) {
				t.pending = rest[len(thinkOpen):]
				t.inThink, t.trimNL = true, true
				continue
			}
			if !final && (rest == "" || strings.HasPrefix(thinkOpen, rest)) {
				return ev // could still become <think>
			}
			t.done = true
		default:
			ev.Content += t.pending
			t.pending = ""
		}
	}
	return ev
}
