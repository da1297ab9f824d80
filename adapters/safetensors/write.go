package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Write stores tensors (in the given order) and optional string metadata as a safetensors file at path, the way
// the reference writer lays it out: the header is padded with spaces to a multiple of 8 bytes so every tensor
// starts 8-byte aligned when offsets are multiples of 8 — which keeps Uint32View/Float32View zero-copy for the
// fixtures Go tests build. Each tensor's Data must match its Shape and DType. It is meant for test fixtures
// and small files: the whole file is assembled in memory.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Encode is Write without the file: it returns the complete file image.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var errs []error
	seen := map[string]bool{}
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "":
			errs = append(errs, fmt.Errorf("tensor %d has an empty name", i))
		case t.Name == metadataKey:
			errs = append(errs, fmt.Errorf("tensor name %q is reserved", t.Name))
		case seen[t.Name]:
			errs = append(errs, fmt.Errorf("tensor %q given twice", t.Name))
		}
		seen[t.Name] = true
		if err := t.checkData(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// Build the header by hand so keys keep the caller's order (encoding/json would sort a map).
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	comma := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		comma()
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		md := make(map[string]string, len(metadata))
		for _, k := range keys {
			md[k] = metadata[k]
		}
		mk, _ := json.Marshal(metadataKey)
		mv, err := json.Marshal(md)
		if err != nil {
			return nil, fmt.Errorf("encode metadata: %w", err)
		}
		hdr.Write(mk)
		hdr.WriteByte(':')
		hdr.Write(mv)
	}
	off := 0
	for _, t := range tensors {
		comma()
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		k, err := json.Marshal(t.Name)
		if err != nil {
			return nil, fmt.Errorf("encode tensor name %q: %w", t.Name, err)
		}
		v, err := json.Marshal(struct {
			DType       DType  `json:"dtype"`
			Shape       []int  `json:"shape"`
			DataOffsets [2]int `json:"data_offsets"`
		}{t.DType, shape, [2]int{off, off + len(t.Data)}})
		if err != nil {
			return nil, fmt.Errorf("encode tensor %q: %w", t.Name, err)
		}
		hdr.Write(k)
		hdr.WriteByte(':')
		hdr.Write(v)
		off += len(t.Data)
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}

	out := make([]byte, 8, 8+hdr.Len()+off)
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	out = append(out, hdr.Bytes()...)
	for _, t := range tensors {
		out = append(out, t.Data...)
	}
	return out, nil
}
