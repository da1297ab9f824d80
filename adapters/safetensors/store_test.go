package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustF(t *testing.T, name string, dt DType, shape []int, vals []float32) Tensor {
	t.Helper()
	x, err := FromFloat32(name, dt, shape, vals)
	require.NoError(t, err)
	return x
}

func mustU(t *testing.T, name string, shape []int, vals []uint32) Tensor {
	t.Helper()
	x, err := FromUint32(name, shape, vals)
	require.NoError(t, err)
	return x
}

func TestWriteOpenRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	vals := []float32{1, -2.5, 0.15625, 3e-5, 65504, float32(math.Inf(-1))}
	in := []Tensor{
		mustF(t, "a.f32", F32, []int{2, 3}, vals),
		mustF(t, "b.f16", F16, []int{6}, vals),
		mustF(t, "c.bf16", BF16, []int{3, 2}, vals),
		mustU(t, "d.u32", []int{3}, []uint32{0xdeadbeef, 1, 0}),
		mustF(t, "e.scalar", F32, nil, []float32{7}),
		mustF(t, "f.empty", BF16, []int{0, 4}, nil),
	}
	require.NoError(t, Write(path, in, map[string]string{"format": "pt"}))

	s, err := OpenFile(path)
	require.NoError(t, err)
	defer s.Close()

	assert.Equal(t, []string{"a.f32", "b.f16", "c.bf16", "d.u32", "e.scalar", "f.empty"}, s.Names())
	assert.Equal(t, map[string]string{"format": "pt"}, s.Metadata())

	a, err := s.Tensor("a.f32")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, a.Shape)
	assert.Equal(t, 6, a.NumElements())
	assert.Equal(t, path, a.File)
	got, err := a.Float32()
	require.NoError(t, err)
	assert.Equal(t, vals, got)
	view, ok, err := a.Float32View()
	require.NoError(t, err)
	require.True(t, ok, "Write pads the header to 8 bytes, so F32 data is aligned")
	assert.Equal(t, vals, view)

	b, err := s.Tensor("b.f16")
	require.NoError(t, err)
	got, err = b.Float32()
	require.NoError(t, err)
	// 3e-5 is not representable in f16; the others are.
	assert.Equal(t, []float32{1, -2.5, 0.15625}, got[:3])
	assert.InDelta(t, 3e-5, got[3], 1e-7)
	assert.Equal(t, float32(65504), got[4])
	assert.True(t, math.IsInf(float64(got[5]), -1))

	c, err := s.Tensor("c.bf16")
	require.NoError(t, err)
	got, err = c.Float32()
	require.NoError(t, err)
	assert.Equal(t, []float32{1, -2.5, 0.15625}, got[:3])
	assert.InEpsilon(t, 3e-5, got[3], 1e-2)
	assert.Equal(t, float32(65536), got[4], "65504 rounds to the nearest bf16, 65536")

	d, err := s.Tensor("d.u32")
	require.NoError(t, err)
	u, err := d.Uint32()
	require.NoError(t, err)
	assert.Equal(t, []uint32{0xdeadbeef, 1, 0}, u)
	uv, ok, err := d.Uint32View()
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, u, uv)

	e, err := s.Tensor("e.scalar")
	require.NoError(t, err)
	assert.Equal(t, 1, e.NumElements())
	f, err := s.Tensor("f.empty")
	require.NoError(t, err)
	assert.Equal(t, 0, f.NumElements())
	got, err = f.Float32()
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = d.Float32()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "d.u32")
	assert.Contains(t, err.Error(), path)
	_, err = a.Uint32()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a.f32")

	_, err = s.Tensor("nope")
	require.ErrorIs(t, err, ErrMissingTensor)
	assert.Contains(t, err.Error(), `"nope"`)
	assert.Contains(t, err.Error(), path)

	assert.True(t, s.Has("e.scalar"))
	assert.False(t, s.Has("nope"))
}

func TestUnusedTracking(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, Write(filepath.Join(dir, "model.safetensors"), []Tensor{
		mustF(t, "x", F32, []int{1}, []float32{1}),
		mustF(t, "y", F32, []int{1}, []float32{2}),
		mustF(t, "z", F32, []int{1}, []float32{3}),
	}, nil))
	s, err := OpenDir(dir)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, []string{"x", "y", "z"}, s.Unused())
	_, err = s.Tensor("y")
	require.NoError(t, err)
	assert.True(t, s.Has("x"), "Has does not mark")
	assert.Equal(t, []string{"x", "z"}, s.Unused())
	s.MarkUsed("z", "not-there")
	assert.Equal(t, []string{"x"}, s.Unused())
}

func TestCloseIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, Write(path, []Tensor{mustF(t, "x", F32, []int{1}, []float32{1})}, nil))
	s, err := OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Tensor("x")
	require.Error(t, err)
}

func TestOpenDirLayouts(t *testing.T) {
	t.Run("sharded index", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), []Tensor{
			mustF(t, "a", F32, []int{2}, []float32{1, 2}),
		}, nil))
		require.NoError(t, Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{
			mustF(t, "b", BF16, []int{2}, []float32{3, 4}),
		}, nil))
		writeIndex(t, dir, map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
		// A stray single file must be ignored when an index exists.
		require.NoError(t, Write(filepath.Join(dir, "model.safetensors"), []Tensor{mustF(t, "stray", F32, []int{1}, []float32{0})}, nil))
		s, err := OpenDir(dir)
		require.NoError(t, err)
		defer s.Close()
		assert.Equal(t, []string{"a", "b"}, s.Names())
		b, err := s.Tensor("b")
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), b.File)
		_, err = s.Tensor("c")
		require.ErrorIs(t, err, ErrMissingTensor)
		assert.Contains(t, err.Error(), dir)
	})
	t.Run("single file", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, Write(filepath.Join(dir, "model.safetensors"), []Tensor{mustF(t, "a", F32, []int{1}, []float32{1})}, nil))
		require.NoError(t, Write(filepath.Join(dir, "other.safetensors"), []Tensor{mustF(t, "b", F32, []int{1}, []float32{1})}, nil))
		s, err := OpenDir(dir)
		require.NoError(t, err)
		defer s.Close()
		assert.Equal(t, []string{"a"}, s.Names())
	})
	t.Run("glob", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, Write(filepath.Join(dir, "x.safetensors"), []Tensor{mustF(t, "a", F32, []int{1}, []float32{1})}, nil))
		require.NoError(t, Write(filepath.Join(dir, "y.safetensors"), []Tensor{mustF(t, "b", F32, []int{1}, []float32{1})}, nil))
		s, err := OpenDir(dir)
		require.NoError(t, err)
		defer s.Close()
		assert.Equal(t, []string{"a", "b"}, s.Names())
	})
	t.Run("duplicate across files", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, Write(filepath.Join(dir, "x.safetensors"), []Tensor{mustF(t, "a", F32, []int{1}, []float32{1})}, nil))
		require.NoError(t, Write(filepath.Join(dir, "y.safetensors"), []Tensor{mustF(t, "a", F32, []int{1}, []float32{1})}, nil))
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrMalformed)
		assert.Contains(t, err.Error(), `"a"`)
		assert.Contains(t, err.Error(), "x.safetensors")
		assert.Contains(t, err.Error(), "y.safetensors")
	})
	t.Run("empty dir", func(t *testing.T) {
		dir := t.TempDir()
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrNoWeights)
		assert.Contains(t, err.Error(), dir)
	})
	t.Run("missing dir", func(t *testing.T) {
		_, err := OpenDir(filepath.Join(t.TempDir(), "nope"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("index names missing shard", func(t *testing.T) {
		dir := t.TempDir()
		writeIndex(t, dir, map[string]string{"a": "gone.safetensors"})
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), "gone.safetensors")
		assert.Contains(t, err.Error(), `"a"`)
	})
	t.Run("index names tensor not in shard", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, Write(filepath.Join(dir, "s1.safetensors"), []Tensor{mustF(t, "a", F32, []int{1}, []float32{1})}, nil))
		require.NoError(t, Write(filepath.Join(dir, "s2.safetensors"), []Tensor{mustF(t, "b", F32, []int{1}, []float32{1})}, nil))
		writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"})
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrMissingTensor)
		assert.Contains(t, err.Error(), `"b"`)
		assert.Contains(t, err.Error(), `"c"`)
	})
	t.Run("index escapes dir", func(t *testing.T) {
		dir := t.TempDir()
		writeIndex(t, dir, map[string]string{"a": "../x.safetensors"})
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrMalformed)
	})
	t.Run("index bad json", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFile), []byte("{"), 0o644))
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrMalformed)
		assert.Contains(t, err.Error(), IndexFile)
	})
	t.Run("bad shard", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("short"), 0o644))
		_, err := OpenDir(dir)
		require.ErrorIs(t, err, ErrMalformed)
		assert.Contains(t, err.Error(), "model.safetensors")
	})
}

func writeIndex(t *testing.T, dir string, wm map[string]string) {
	t.Helper()
	var sb strings.Builder
	sb.WriteString(`{"metadata":{"total_size":0},"weight_map":{`)
	first := true
	for k, v := range wm {
		if !first {
			sb.WriteString(",")
		}
		first = false
		sb.WriteString(`"` + k + `":"` + v + `"`)
	}
	sb.WriteString("}}")
	require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFile), []byte(sb.String()), 0o644))
}

// rawFile builds a file image from a literal header and data, without Write's checks.
func rawFile(hdr string, data []byte) []byte {
	b := make([]byte, 8, 8+len(hdr)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	return append(b, data...)
}

func TestParseHeaderErrors(t *testing.T) {
	hugeLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(hugeLen, 1<<40)
	longLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(longLen, 9)
	tests := []struct {
		name string
		file []byte
		want []string // substrings of the error
	}{
		{"too short", []byte{1, 2, 3}, []string{"shorter than the 8-byte"}},
		{"header over limit", hugeLen, []string{"exceeds"}},
		{"header longer than file", longLen, []string{"longer than the 8 bytes"}},
		{"not json", rawFile("hello", nil), []string{"not a JSON object"}},
		{"empty header", rawFile("", nil), []string{"not a JSON object"}},
		{"array header", rawFile("[]", nil), []string{"not a JSON object"}},
		{"truncated json", rawFile(`{"a":{"dtype":"F32"`, nil), []string{"header JSON"}},
		{"trailing garbage", rawFile(`{} {}`, nil), []string{"trailing data"}},
		{"unknown dtype", rawFile(`{"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`"w"`, `unknown dtype "Q4"`}},
		{"size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`"w"`, "needs 8 bytes"}},
		{"offsets out of range", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 4)), []string{`"w"`, "outside"}},
		{"offsets reversed", rawFile(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, make([]byte, 4)), []string{`"w"`, "outside"}},
		{"negative offset", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, make([]byte, 4)), []string{`"w"`, "outside"}},
		{"truncated file", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"c":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}`, make([]byte, 3)),
			[]string{"truncated: 2 tensors", `"b"`, "3-byte data buffer", "at least 6 bytes"}},
		{"three offsets", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, make([]byte, 1)), []string{"has 3 values"}},
		{"negative dim", rawFile(`{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, make([]byte, 1)), []string{"negative"}},
		{"fractional dim", rawFile(`{"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, make([]byte, 1)), []string{`"w"`, "bad record"}},
		{"huge shape", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}}`, make([]byte, 1)), []string{"too large"}},
		{"missing field", rawFile(`{"w":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), []string{"lacks data_offsets"}},
		{"unknown field", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, make([]byte, 4)), []string{`"w"`, "unknown field"}},
		{"record not object", rawFile(`{"w":3}`, nil), []string{`"w"`, "bad record"}},
		{"duplicate", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), []string{`"w"`, "twice"}},
		{"overlap", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, make([]byte, 3)), []string{`"b"`, `"a"`, "overlaps"}},
		{"gap", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, make([]byte, 3)), []string{`"b"`, "unused bytes"}},
		{"trailing bytes", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 3)), []string{"cover 1 of 3"}},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, nil), []string{"__metadata__"}},
		{"empty name", rawFile(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), []string{"empty tensor name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHeader("f.safetensors", tc.file)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrMalformed), "error %v must wrap ErrMalformed", err)
			assert.Contains(t, err.Error(), "f.safetensors")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		n    int
	}{
		{"empty object", rawFile(`{}`, nil), 0},
		{"padded", rawFile(`{}      `, nil), 0},
		{"null metadata", rawFile(`{"__metadata__":null}`, nil), 0},
		{"metadata and tensors out of order", rawFile(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 2)), 2},
		{"zero-size tensors share an offset", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]}}`, nil), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseHeader("f", tc.file)
			require.NoError(t, err)
			assert.Len(t, h.tensors, tc.n)
		})
	}
}

func TestBF16Rounding(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // exactly halfway, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // halfway, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // just above halfway
		{float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // NaN with low payload stays NaN
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, Float32ToBF16(tc.in), "%x", math.Float32bits(tc.in))
	}
	assert.Equal(t, float32(1), BF16ToFloat32(0x3f80))
}

func TestEncodeRejectsBadTensors(t *testing.T) {
	_, err := Encode([]Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"x"`)
	_, err = Encode([]Tensor{mustF(t, "x", F32, []int{1}, []float32{1}), mustF(t, "x", F32, []int{1}, []float32{1})}, nil)
	require.Error(t, err)
	_, err = Encode([]Tensor{{Name: "__metadata__", DType: U8, Shape: []int{0}}}, nil)
	require.Error(t, err)
	_, err = FromFloat32("x", U8, []int{1}, []float32{1})
	require.Error(t, err)
	_, err = FromFloat32("x", F32, []int{2}, []float32{1})
	require.Error(t, err)
}

func TestViewsAndIntoEdgeCases(t *testing.T) {
	buf := make([]byte, 64)
	// Pick an offset that puts the data at an address ≡ 1 (mod 4), whatever the allocator returned.
	off := int((5 - uintptr(unsafe.Pointer(&buf[0]))%4) % 4)
	if off == 0 {
		off = 4
	}
	binary.LittleEndian.PutUint32(buf[off:], 7)
	binary.LittleEndian.PutUint32(buf[off+4:], 9)
	// Data at a misaligned address cannot be viewed as []uint32; the copy path still works.
	u := &Tensor{Name: "odd", DType: U32, Shape: []int{3}, Data: buf[off : off+12], File: "mem"}
	_, ok, err := u.Uint32View()
	require.NoError(t, err)
	assert.False(t, ok)
	vals, err := u.Uint32()
	require.NoError(t, err)
	assert.Equal(t, []uint32{7, 9, 0}, vals)

	f := &Tensor{Name: "f", DType: F32, Shape: []int{2}, Data: make([]byte, 8), File: "mem"}
	err = f.Float32Into(make([]float32, 3))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"f"`)
	_, _, err = f.Uint32View()
	require.Error(t, err)
	_, _, err = u.Float32View()
	require.Error(t, err)

	// Hand-built tensors whose Data does not match Shape are errors, not panics.
	short := &Tensor{Name: "short", DType: BF16, Shape: []int{4}, Data: make([]byte, 6), File: "mem"}
	_, err = short.Float32()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "short")
	neg := &Tensor{Name: "neg", DType: F32, Shape: []int{-1}, File: "mem"}
	_, err = neg.Float32()
	require.Error(t, err)
	unk := &Tensor{Name: "unk", DType: "Q9", Shape: []int{1}, Data: make([]byte, 1), File: "mem"}
	_, err = unk.Float32()
	require.Error(t, err)
}

func TestConcurrentFetch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	var in []Tensor
	for i := range 64 {
		in = append(in, mustF(t, "t"+string(rune('A'+i%26))+string(rune('a'+i/26)), F32, []int{4}, []float32{float32(i), 1, 2, 3}))
	}
	require.NoError(t, Write(path, in, nil))
	s, err := OpenFile(path)
	require.NoError(t, err)
	defer s.Close()
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i, x := range in {
				if i%4 != g {
					continue
				}
				tt, err := s.Tensor(x.Name)
				if err != nil {
					done <- err
					return
				}
				if _, err := tt.Float32(); err != nil {
					done <- err
					return
				}
				_ = s.Unused()
			}
			done <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-done)
	}
	assert.Empty(t, s.Unused())
}

// A truncated checkpoint is one short error naming the truncation, not one line per tensor past the end.
func TestTruncatedFileIsOneError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	var tensors []Tensor
	for i := range 50 {
		tensors = append(tensors, Tensor{Name: fmt.Sprintf("layer.%02d.weight", i), DType: F32, Shape: []int{16, 16}, Data: make([]byte, 16*16*4)})
	}
	require.NoError(t, Write(path, tensors, nil))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b[:len(b)/2], 0o644))
	_, err = OpenFile(path)
	require.ErrorIs(t, err, ErrMalformed)
	assert.NotContains(t, err.Error(), "\n")
	assert.Contains(t, err.Error(), "truncated")
	assert.Less(t, len(err.Error()), 400, err.Error())
}

// Bytes is the files' size on disk while mapped, 0 once closed.
func TestStoreBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, Write(path, []Tensor{mustF(t, "x", F32, []int{3}, []float32{1, 2, 3})}, nil))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	s, err := OpenFile(path)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), s.Bytes())
	require.NoError(t, s.Close())
	assert.Zero(t, s.Bytes())
}
