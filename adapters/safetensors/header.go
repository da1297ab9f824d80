package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// maxHeaderLen bounds the JSON header like the reference implementation does (100 MB); a larger length is
// far more likely a corrupt or non-safetensors file than a real header, and would otherwise make us parse
// gigabytes of mapping as JSON.
const maxHeaderLen = 100 << 20

// metadataKey is the reserved header entry holding free-form string metadata.
const metadataKey = "__metadata__"

// header is a parsed and validated safetensors header.
type header struct {
	// tensors in file order (sorted by data offset).
	tensors []entry
	// metadata is the __metadata__ map (nil when absent).
	metadata map[string]string
	// dataStart is the offset of the byte buffer inside the file (8 + header length).
	dataStart int
}

// entry is one tensor's header record with offsets relative to the data buffer.
type entry struct {
	name       string
	dtype      DType
	shape      []int
	begin, end int
}

// rawEntry mirrors the JSON of one tensor record.
type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader validates the whole file image b (header and data) and returns its tensor table. file only
// names the file in errors. It never panics, whatever b holds.
//
// Checks: the 8-byte little-endian header length fits in the file and under maxHeaderLen; the header is one
// JSON object (trailing whitespace allowed, as writers pad it to 8 bytes) without duplicate names; every
// record has exactly dtype, shape and data_offsets, a known dtype, non-negative dimensions and offsets with
// begin ≤ end; shape×dtype size equals end−begin; __metadata__ is a string→string map; and the tensors tile
// the data buffer exactly — no overlap, no gap, nothing after the last tensor — like the reference
// implementation demands.
func parseHeader(file string, b []byte) (*header, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%s: %w: file is %d bytes, shorter than the 8-byte header length", file, ErrMalformed, len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > maxHeaderLen {
		return nil, fmt.Errorf("%s: %w: header length %d exceeds the %d-byte limit", file, ErrMalformed, n, maxHeaderLen)
	}
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%s: %w: header length %d is longer than the %d bytes after it", file, ErrMalformed, n, len(b)-8)
	}
	hdr := b[8 : 8+n]
	if len(bytes.TrimLeft(hdr, " \t\r\n")) == 0 || bytes.TrimLeft(hdr, " \t\r\n")[0] != '{' {
		return nil, fmt.Errorf("%s: %w: header is not a JSON object", file, ErrMalformed)
	}
	h := &header{dataStart: 8 + int(n)}
	dataLen := len(b) - h.dataStart

	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the opening brace, checked above
		return nil, fmt.Errorf("%s: %w: header JSON: %v", file, ErrMalformed, err)
	}
	seen := make(map[string]bool)
	var errs []error
	var pastEnd []string // tensors whose data lies past the end of the file
	var needEnd int64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w: header JSON: %v", file, ErrMalformed, err)
		}
		name, ok := tok.(string)
		if !ok { // cannot happen for a valid object, but the decoder is the judge
			return nil, fmt.Errorf("%s: %w: header JSON: key %v is not a string", file, ErrMalformed, tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s: %w: header JSON at %q: %v", file, ErrMalformed, name, err)
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("%s: %w: tensor %q appears twice in the header", file, ErrMalformed, name))
			continue
		}
		seen[name] = true
		if name == metadataKey {
			md, err := parseMetadata(raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w: %s: %v", file, ErrMalformed, metadataKey, err))
			}
			h.metadata = md
			continue
		}
		e, err := parseEntry(name, raw, dataLen)
		if pe := (*pastEndError)(nil); errors.As(err, &pe) {
			pastEnd = append(pastEnd, name)
			needEnd = max(needEnd, pe.end)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: tensor %q: %v", file, ErrMalformed, name, err))
			continue
		}
		h.tensors = append(h.tensors, e)
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, fmt.Errorf("%s: %w: header JSON: %v", file, ErrMalformed, err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: %w: header JSON has trailing data after the object (%v)", file, ErrMalformed, tokOrErr(tok, err))
	}
	if len(pastEnd) > 1 && len(pastEnd) == len(errs) {
		return nil, fmt.Errorf("%s: %w: the file is truncated: %d tensors (the first %q) lie past the end of its %d-byte data buffer, which the header says holds at least %d bytes",
			file, ErrMalformed, len(pastEnd), pastEnd[0], dataLen, needEnd)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// The tensors must tile the buffer: sort by offset and walk.
	slices.SortStableFunc(h.tensors, func(x, y entry) int {
		if x.begin != y.begin {
			return x.begin - y.begin
		}
		return x.end - y.end
	})
	pos := 0
	prev := ""
	for _, e := range h.tensors {
		switch {
		case e.begin < pos:
			errs = append(errs, fmt.Errorf("%s: %w: tensor %q [%d,%d) overlaps tensor %q ending at %d", file, ErrMalformed, e.name, e.begin, e.end, prev, pos))
		case e.begin > pos:
			errs = append(errs, fmt.Errorf("%s: %w: %d unused bytes before tensor %q at %d (after %q)", file, ErrMalformed, e.begin-pos, e.name, e.begin, orStart(prev)))
		}
		if e.end > pos {
			pos, prev = e.end, e.name
		}
	}
	if pos != dataLen {
		errs = append(errs, fmt.Errorf("%s: %w: tensors cover %d of %d data bytes (trailing bytes after %q)", file, ErrMalformed, pos, dataLen, orStart(prev)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return h, nil
}

// pastEndError is a record whose data lies (partly) past the end of the file: alone, a bad record; for many
// records at once, a truncated file, reported as such in one line instead of once per tensor.
type pastEndError struct {
	begin, end int64
	dataLen    int
}

func (e *pastEndError) Error() string {
	return fmt.Sprintf("data_offsets [%d,%d] outside the %d-byte data buffer", e.begin, e.end, e.dataLen)
}

func orStart(name string) string {
	if name == "" {
		return "start of data"
	}
	return name
}

func tokOrErr(tok json.Token, err error) any {
	if err != nil {
		return err
	}
	return tok
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var md map[string]string
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("must map strings to strings: %v", err)
	}
	return md, nil
}

func parseEntry(name string, raw json.RawMessage, dataLen int) (entry, error) {
	if name == "" {
		return entry{}, errors.New("empty tensor name")
	}
	var r rawEntry
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return entry{}, fmt.Errorf("bad record: %v", err)
	}
	var missing []string
	if r.DType == nil {
		missing = append(missing, "dtype")
	}
	if r.Shape == nil {
		missing = append(missing, "shape")
	}
	if r.DataOffsets == nil {
		missing = append(missing, "data_offsets")
	}
	if len(missing) > 0 {
		return entry{}, fmt.Errorf("record lacks %s", strings.Join(missing, ", "))
	}
	dt := DType(*r.DType)
	size, ok := dt.Size()
	if !ok {
		return entry{}, fmt.Errorf("unknown dtype %q", *r.DType)
	}
	offs := *r.DataOffsets
	if len(offs) != 2 {
		return entry{}, fmt.Errorf("data_offsets has %d values, want 2", len(offs))
	}
	begin, end := offs[0], offs[1]
	if begin < 0 || end < begin {
		return entry{}, fmt.Errorf("data_offsets [%d,%d] outside the %d-byte data buffer", begin, end, dataLen)
	}
	if end > int64(dataLen) {
		return entry{}, &pastEndError{begin: begin, end: end, dataLen: dataLen}
	}
	shape := make([]int, len(*r.Shape))
	hasZero := false
	for i, d := range *r.Shape {
		if d < 0 {
			return entry{}, fmt.Errorf("shape %v has a negative dimension", *r.Shape)
		}
		hasZero = hasZero || d == 0
		shape[i] = int(d)
	}
	bytesNeeded := int64(size)
	if hasZero {
		bytesNeeded = 0
	}
	for _, d := range *r.Shape {
		if hasZero {
			break
		}
		// Overflow guard: a product past MaxInt64 can never match a real byte span.
		if bytesNeeded > math.MaxInt64/d {
			return entry{}, fmt.Errorf("shape %v of %s is too large for any file", shape, dt)
		}
		bytesNeeded *= d
	}
	if bytesNeeded != end-begin {
		return entry{}, fmt.Errorf("shape %v of %s needs %d bytes but data_offsets [%d,%d] span %d", shape, dt, bytesNeeded, begin, end, end-begin)
	}
	return entry{name: name, dtype: dt, shape: shape, begin: int(begin), end: int(end)}, nil
}
