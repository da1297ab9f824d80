package openai

import (
	"io"
	"testing"

	"github.com/higgs-go/higgs/ports"
)

// BenchmarkSSEEvent is the per-token cost of one streamed chat delta.
func BenchmarkSSEEvent(b *testing.B) {
	s := &sseWriter{w: io.Discard}
	ev := ports.GenerateEvent{Content: " world"}
	for b.Loop() {
		if err := s.event(chatDeltaChunk("chatcmpl-test", 1700000000, "toy", ev, "")); err != nil {
			b.Fatal(err)
		}
	}
}
