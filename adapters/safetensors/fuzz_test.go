package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseHeader feeds arbitrary file images to the parser. It must never panic, and whatever it accepts
// must be self-consistent: every tensor's span lies in the data buffer and matches shape×dtype, spans tile the
// buffer, and re-encoding the accepted tensors reproduces a file the parser accepts with the same table.
func FuzzParseHeader(f *testing.F) {
	seeds := [][]byte{
		rawFile(`{}`, nil),
		rawFile(`{"__metadata__":{"format":"pt"}}`, nil),
		rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)),
		rawFile(`{"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},"b":{"dtype":"U32","shape":[],"data_offsets":[4,8]}}  `, make([]byte, 8)),
		rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil),
		rawFile(`{"a":{"dtype":"F16","shape":[4294967296,4294967296],"data_offsets":[0,2]}}`, make([]byte, 2)),
		rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		{},
	}
	if b, err := Encode([]Tensor{
		{Name: "w", DType: U32, Shape: []int{2, 2}, Data: make([]byte, 16)},
		{Name: "s", DType: BF16, Shape: []int{2, 1}, Data: []byte{0x80, 0x3f, 0, 0x40}},
	}, map[string]string{"k": "v"}); err == nil {
		seeds = append(seeds, b)
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader("fuzz.safetensors", b)
		if err != nil {
			if h != nil {
				t.Fatalf("error with a header: %v", err)
			}
			return
		}
		dataLen := len(b) - h.dataStart
		pos := 0
		tensors := make([]Tensor, 0, len(h.tensors))
		for _, e := range h.tensors {
			size, ok := e.dtype.Size()
			if !ok {
				t.Fatalf("accepted unknown dtype %q", e.dtype)
			}
			n := size
			for _, d := range e.shape {
				n *= d
			}
			if e.begin < 0 || e.end > dataLen || e.end-e.begin != n {
				t.Fatalf("accepted inconsistent tensor %+v (data %d bytes)", e, dataLen)
			}
			if e.begin != pos && !(n == 0 && e.begin <= pos) {
				t.Fatalf("accepted non-tiling tensor %+v at %d", e, pos)
			}
			pos = max(pos, e.end)
			x := Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: b[h.dataStart+e.begin : h.dataStart+e.end]}
			if _, err := x.Float32(); err != nil && (e.dtype == F32 || e.dtype == F16 || e.dtype == BF16) {
				t.Fatalf("float conversion of accepted tensor failed: %v", err)
			}
			tensors = append(tensors, x)
		}
		if pos != dataLen {
			t.Fatalf("accepted %d trailing bytes", dataLen-pos)
		}
		again, err := Encode(tensors, h.metadata)
		if err != nil {
			t.Fatalf("re-encode of accepted file failed: %v", err)
		}
		h2, err := parseHeader("again", again)
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if len(h2.tensors) != len(h.tensors) {
			t.Fatalf("re-encoded file has %d tensors, want %d", len(h2.tensors), len(h.tensors))
		}
		if !bytes.Equal(again[h2.dataStart:], b[h.dataStart:]) {
			t.Fatalf("re-encoded data differs")
		}
	})
}

// TestOpenFileFuzzCorpus opens every committed fuzz corpus file through the real mmap path, so the corpus
// also exercises OpenFile (file-level checks) without running the fuzzer.
func TestOpenFileFuzzCorpus(t *testing.T) {
	entries, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzParseHeader", "*"))
	if err != nil || len(entries) == 0 {
		t.Skip("no committed fuzz corpus")
	}
	for _, e := range entries {
		raw, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := decodeCorpus(raw)
		if !ok {
			continue
		}
		path := filepath.Join(t.TempDir(), "x.safetensors")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := OpenFile(path)
		if err == nil {
			for _, n := range s.Names() {
				if _, err := s.Tensor(n); err != nil {
					t.Errorf("%s: listed tensor %q not fetchable: %v", e, n, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		}
	}
}

// decodeCorpus reads a Go fuzz corpus file holding one []byte value ("go test fuzz v1" then []byte("…")).
func decodeCorpus(raw []byte) ([]byte, bool) {
	lines := strings.SplitN(string(raw), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, false
	}
	v := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(v, "[]byte(") || !strings.HasSuffix(v, ")") {
		return nil, false
	}
	s, err := strconv.Unquote(v[len("[]byte(") : len(v)-1])
	if err != nil {
		return nil, false
	}
	return []byte(s), true
}
