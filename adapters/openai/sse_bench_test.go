package openai

import (
	"io"
	"testing"

	"github.com/higgs-go/higgs/ports"
)

// BenchmarkSSEEvent is the per-token cost of one streamed chat delta.
func BenchmarkSSEEvent(b *testing.B) {
	s := &SSEWriter{w: io.Discard}
	ev := ports.GenerateEvent{Content: " world"}
	for b.Loop() {
		if err := s.Event(chatDeltaChunk("chatcmpl-test", 1700000000, "toy", ev, "")); err != nil {
			b.Fatal(err)
		}
	}
}
