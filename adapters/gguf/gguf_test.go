package gguf

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleFile(t testing.TB) ([]KV, []Tensor) {
	t.Helper()
	q8, err := AppendQ8_0Codes(nil, 0.5, make([]int8, 32))
	require.NoError(t, err)
	kvs := []KV{
		{"general.architecture", "qwen3"}, {"u8", uint8(7)}, {"i8", int8(-3)}, {"u16", uint16(600)},
		{"i16", int16(-600)}, {"u32", uint32(1 << 30)}, {"i32", int32(-5)}, {"f32", float32(1.5)},
		{"b", true}, {"u64", uint64(1 << 40)}, {"i64", int64(-1 << 40)}, {"f64", 2.25},
		{"strs", []string{"a", "", "ü b"}}, {"i32s", []int32{1, -2, 3}}, {"f32s", []float32{0.5}},
		{"bools", []bool{true, false}}, {"empty", []string{}},
	}
	ts := []Tensor{
		{Name: "norm", Dims: []uint64{3}, Type: F32, Data: AppendF32(nil, []float32{1, 2, 3})},
		{Name: "m", Dims: []uint64{32, 1}, Type: Q8_0, Data: q8},
	}
	return kvs, ts
}

func TestWriteParseRoundTrip(t *testing.T) {
	kvs, ts := sampleFile(t)
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, kvs, ts))
	f, err := Parse(buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, uint32(3), f.Version)
	assert.Equal(t, kvs, f.KV)
	require.Len(t, f.Tensors, 2)
	for i := range ts {
		assert.Equal(t, ts[i], f.Tensors[i])
	}
	v, ok := f.Get("f64")
	assert.True(t, ok)
	assert.Equal(t, 2.25, v)
	_, ok = f.Tensor("m")
	assert.True(t, ok)
	// Data starts aligned.
	off := bytes.Index(buf.Bytes(), ts[0].Data)
	assert.Zero(t, off%DefaultAlignment)
}

func TestWriteRejects(t *testing.T) {
	for name, c := range map[string]struct {
		kvs []KV
		ts  []Tensor
	}{
		"duplicate key":   {kvs: []KV{{"a", uint32(1)}, {"a", uint32(2)}}},
		"bad alignment":   {kvs: []KV{{"general.alignment", uint32(3)}}},
		"unknown type":    {kvs: []KV{{"a", struct{}{}}}},
		"short data":      {ts: []Tensor{{Name: "t", Dims: []uint64{4}, Type: F32, Data: make([]byte, 15)}}},
		"unaligned block": {ts: []Tensor{{Name: "t", Dims: []uint64{16}, Type: Q8_0, Data: make([]byte, 17)}}},
		"duplicate":       {ts: []Tensor{{Name: "t", Dims: []uint64{1}, Type: F32, Data: make([]byte, 4)}, {Name: "t", Dims: []uint64{1}, Type: F32, Data: make([]byte, 4)}}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Error(t, Write(&bytes.Buffer{}, c.kvs, c.ts))
		})
	}
}

func TestParseRejects(t *testing.T) {
	kvs, ts := sampleFile(t)
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, kvs, ts))
	good := buf.Bytes()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("GGUX"), good[4:]...),
		"version":   append(append([]byte{}, good[:4]...), append([]byte{9, 0, 0, 0}, good[8:]...)...),
		"truncated": good[:len(good)-DefaultAlignment], // into the last tensor's data
		"header":    good[:40],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(b)
			assert.ErrorIs(t, err, ErrFormat)
		})
	}
}

func TestBlocks(t *testing.T) {
	codes := make([]int8, 32)
	nib := make([]uint8, 32)
	for j := range 32 {
		codes[j] = int8(j*8 - 128)
		nib[j] = uint8(j % 16)
	}
	q8, err := AppendQ8_0Codes(nil, 0.25, codes)
	require.NoError(t, err)
	v, err := Decode(Q8_0, q8, 32)
	require.NoError(t, err)
	for j := range 32 {
		assert.Equal(t, 0.25*float32(codes[j]), v[j])
	}
	q4, err := AppendQ4_0Codes(nil, 0.5, nib)
	require.NoError(t, err)
	v, err = Decode(Q4_0, q4, 32)
	require.NoError(t, err)
	for j := range 32 {
		assert.Equal(t, 0.5*float32(int(nib[j])-8), v[j], j)
	}
	_, err = AppendQ8_0Codes(nil, 1.0/3, codes) // not an f16 value
	assert.ErrorIs(t, err, ErrInexact)
	_, err = AppendF16(nil, []float32{1.0 / 3}, false)
	assert.ErrorIs(t, err, ErrInexact)
	_, err = AppendBF16(nil, []float32{1.0 / 3}, false)
	assert.ErrorIs(t, err, ErrInexact)
	b, err := AppendBF16(nil, []float32{1.0 / 3, -2}, true)
	require.NoError(t, err)
	v, err = Decode(BF16, b, 2)
	require.NoError(t, err)
	assert.InDelta(t, 1.0/3, v[0], 1e-2)
	assert.Equal(t, float32(-2), v[1])
}

func TestRequantizeClose(t *testing.T) {
	row := make([]float32, 64)
	for j := range row {
		row[j] = float32(j%17)/8 - 1
	}
	for _, c := range []struct {
		typ Type
		enc func([]byte, []float32) ([]byte, error)
		tol float64
	}{{Q8_0, QuantizeQ8_0, 1.0 / 127}, {Q4_0, QuantizeQ4_0, 1.0 / 8}} {
		b, err := c.enc(nil, row)
		require.NoError(t, err)
		v, err := Decode(c.typ, b, len(row))
		require.NoError(t, err)
		for j := range row {
			assert.InDelta(t, row[j], v[j], c.tol, "%s %d", c.typ, j)
		}
	}
}

func TestParseType(t *testing.T) {
	for _, ty := range []Type{F32, F16, BF16, Q8_0, Q4_0} {
		got, err := ParseType(ty.String())
		require.NoError(t, err)
		assert.Equal(t, ty, got)
	}
	_, err := ParseType("q5_k")
	assert.Error(t, err)
}

func FuzzParse(f *testing.F) {
	kvs, ts := sampleFile(f)
	var buf bytes.Buffer
	require.NoError(f, Write(&buf, kvs, ts))
	f.Add(buf.Bytes())
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			assert.ErrorIs(t, err, ErrFormat)
			return
		}
		// What parses re-encodes to a file that parses to the same content.
		var out bytes.Buffer
		if err := Write(&out, file.KV, file.Tensors); err != nil {
			return // e.g. an alignment the writer derives differently; parsing is what is fuzzed
		}
		again, err := Parse(out.Bytes())
		require.NoError(t, err)
		assert.Equal(t, len(file.Tensors), len(again.Tensors))
		assert.Equal(t, len(file.KV), len(again.KV))
	})
}
