package openai

import (
	"io"
	"net/http"
	"testing"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// discardWriter is a flushable ResponseWriter that keeps nothing, so that the benchmark measures framing,
// not a growing recorder.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return io.Discard.Write(b) }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkSSEEvent is the per-token cost of one streamed chat delta.
func BenchmarkSSEEvent(b *testing.B) {
	s := httpapi.StartSSE(&discardWriter{h: http.Header{}})
	ev := ports.GenerateEvent{Content: " world"}
	for b.Loop() {
		if err := s.Event(chatDeltaChunk("chatcmpl-test", 1700000000, "toy", ev, "")); err != nil {
			b.Fatal(err)
		}
	}
}
