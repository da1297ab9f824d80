package tokenizer_test

import (
	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"

	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Benchmark inputs are large, varied texts so the word cache does not turn the measurement into map
// lookups: the Go specification (English prose, HTML tags stripped), net/http/server.go (Go code), both from
// the local Go installation, and deterministic pseudo-random CJK text.

func goRootFile(b *testing.B, rel string) string {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(runtime.GOROOT(), rel))
	if err != nil {
		b.Skipf("benchmark input %s not available: %v", rel, err)
	}
	return string(data)
}

var tagRE = regexp.MustCompile(`<[^>]*>`)

func englishText(b *testing.B) string {
	return tagRE.ReplaceAllString(goRootFile(b, "doc/go_spec.html"), "")
}

func cjkText() string {
	rng := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	for sb.Len() < 256<<10 {
		for range 5 + rng.IntN(30) {
			sb.WriteRune(rune(0x4E00 + rng.IntN(0x5000)))
		}
		sb.WriteString([]string{"，", "。", "、", "！", "\n"}[rng.IntN(5)])
	}
	return sb.String()
}

func benchmarkEncode(b *testing.B, text string) {
	tok := tokenizers(b)["qwen3"]
	tok.EncodeWith(text, true) // warm the word cache the way a running server has it
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		tok.EncodeWith(text, true)
	}
	reportCPUThroughput(b, len(text), cpuTime()-cpu)
}

// cpuTime is the process's user+system CPU time. The shared CI/dev machines are often oversubscribed, so
// wall-clock MB/s understates what one core does; MB/cpu-s is reported beside it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPUThroughput(b *testing.B, size int, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(size)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
	}
}

func BenchmarkEncodeEnglish(b *testing.B) { benchmarkEncode(b, englishText(b)) }
func BenchmarkEncodeGoCode(b *testing.B)  { benchmarkEncode(b, goRootFile(b, "src/net/http/server.go")) }
func BenchmarkEncodeCJK(b *testing.B)     { benchmarkEncode(b, cjkText()) }

// BenchmarkEncodeEnglishCold measures encoding with an empty word cache each time (every word merged).
func BenchmarkEncodeEnglishCold(b *testing.B) {
	text := englishText(b)
	tok := tokenizers(b)["qwen3"]
	b.SetBytes(int64(len(text)))
	cpu := cpuTime()
	for b.Loop() {
		tok.ClearCache()
		tok.EncodeWith(text, true)
	}
	reportCPUThroughput(b, len(text), cpuTime()-cpu)
}

func BenchmarkLoadQwen3(b *testing.B) {
	for b.Loop() {
		if _, err := tokenizer.Load(filepath.Join("testdata", "qwen3")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodePlainGoCode encodes the same Go source as BenchmarkEncodeGoCode wrapped in a chat turn, with
// the source as one plain span (the cost of keeping client text out of the control tokens), beside Encode
// of the same prompt.
func BenchmarkEncodePlainGoCode(b *testing.B) {
	body := goRootFile(b, "src/net/http/server.go")
	text := "<|im_start|>user\n" + body + "<|im_end|>\n<|im_start|>assistant\n"
	span := []ports.Span{{Start: len("<|im_start|>user\n"), End: len("<|im_start|>user\n") + len(body)}}
	tok := tokenizers(b)["qwen3"]
	b.Run("Encode", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.EncodeWith(text, true)
		}
	})
	b.Run("EncodePlain", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if _, err := tok.EncodePlain(text, span); err != nil {
				b.Fatal(err)
			}
		}
	})
}
