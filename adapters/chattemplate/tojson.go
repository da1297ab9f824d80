package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// pyToJSONName is the name templates call pyToJSON by. github.com/ardanlabs/jinja resolves a filter among its
// built-ins first and only then among the render data, so a template's `tojson` is renamed to this at compile
// time (rewriteToJSON) and the render data binds it.
const pyToJSONName = "higgs_py_tojson"

// rewriteToJSON renames the filter `tojson` (after a `|` inside {{ }} or {% %}, outside string literals, and
// in `{% filter tojson %}`) to pyToJSONName. Text, comments and {% raw %} blocks are copied unchanged.
func rewriteToJSON(src string) string {
	var out strings.Builder
	i := 0
	for i < len(src) {
		open := strings.Index(src[i:], "{")
		if open < 0 || i+open+1 >= len(src) {
			out.WriteString(src[i:])
			break
		}
		open += i
		out.WriteString(src[i:open])
		var closer string
		switch src[open+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		default:
			out.WriteByte('{')
			i = open + 1
			continue
		}
		var end int
		if closer == "#}" {
			// Comments hold no string literals: an apostrophe in one must not swallow what follows.
			end = len(src)
			if k := strings.Index(src[open+2:], closer); k >= 0 {
				end = open + 2 + k + len(closer)
			}
		} else {
			end = tagEnd(src, open+2, closer)
		}
		tag := src[open:end]
		switch {
		case closer == "#}":
			out.WriteString(tag)
		case closer == "%}" && isRawTag(tag):
			// Copy through the matching endraw tag verbatim.
			stop := strings.Index(src[end:], "endraw")
			if stop < 0 {
				out.WriteString(src[open:])
				return out.String()
			}
			stop = tagEnd(src, end+stop, "%}")
			out.WriteString(src[open:stop])
			end = stop
		default:
			out.WriteString(renameFilter(tag))
		}
		i = end
	}
	return out.String()
}

// tagEnd returns the index just past closer, searching from from and skipping string literals; len(src) if the
// tag never closes (the compiler then reports the template's error itself).
func tagEnd(src string, from int, closer string) int {
	for j := from; j < len(src); j++ {
		switch c := src[j]; {
		case c == '"' || c == '\'':
			j = skipString(src, j)
		case strings.HasPrefix(src[j:], closer):
			return j + len(closer)
		}
	}
	return len(src)
}

// skipString returns the index of the quote closing the literal that opens at src[j].
func skipString(src string, j int) int {
	q := src[j]
	for k := j + 1; k < len(src); k++ {
		switch src[k] {
		case '\\':
			k++
		case q:
			return k
		}
	}
	return len(src)
}

func isRawTag(tag string) bool {
	if len(tag) < 4 || !strings.HasSuffix(tag, "%}") {
		return false
	}
	body := strings.Trim(tag[2:len(tag)-2], "-+ \t\r\n")
	return body == "raw"
}

// renameFilter renames tojson where it is a filter in one tag: after `|`, or as the name of a filter block.
func renameFilter(tag string) string {
	var out strings.Builder
	filterNext := false // the next identifier is a filter name
	body := strings.TrimLeft(tag[2:], "-+ \t\r\n")
	if strings.HasPrefix(tag, "{%") && strings.HasPrefix(body, "filter") &&
		len(body) > len("filter") && strings.ContainsRune(" \t\r\n", rune(body[len("filter")])) {
		filterNext = true
		out.WriteString(tag[:len(tag)-len(body)+len("filter")])
		tag = tag[len(tag)-len(body)+len("filter"):]
	}
	for j := 0; j < len(tag); j++ {
		c := tag[j]
		switch {
		case c == '"' || c == '\'':
			k := skipString(tag, j)
			out.WriteString(tag[j:min(k+1, len(tag))])
			j = k
			filterNext = false
		case c == '|':
			out.WriteByte(c)
			filterNext = true
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			out.WriteByte(c)
		case isIdentByte(c):
			k := j
			for k < len(tag) && isIdentByte(tag[k]) {
				k++
			}
			word := tag[j:k]
			if filterNext && word == "tojson" {
				word = pyToJSONName
			}
			out.WriteString(word)
			filterNext = false
			j = k - 1
		default:
			out.WriteByte(c)
			filterNext = false
		}
	}
	return out.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// pyToJSON is transformers' chat-template `tojson` filter, json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) with those keyword arguments honoured, so tool schemas and tool-call
// arguments render byte for byte as in Python: floats in Python's repr (1.0, 1e-05, 1234567.0, 1e+16), strings
// escaped only where Python escapes them (not U+2028/U+2029, not <, >, &), NaN/Infinity as Python writes them.
func pyToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	// transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
	params := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	if len(args)-1 > len(params) {
		return jinja.Undefined(), fmt.Errorf("tojson: %d positional arguments, at most %d", len(args)-1, len(params))
	}
	kw := make(map[string]jinja.Value, len(kwargs)+len(args)-1)
	for i, v := range args[1:] {
		kw[params[i]] = v
	}
	for k, v := range kwargs {
		if _, dup := kw[k]; dup || !slices.Contains(params, k) {
			return jinja.Undefined(), fmt.Errorf("tojson: unexpected or repeated argument %q", k)
		}
		kw[k] = v
	}
	kwargs = kw
	e := jsonEncoder{item: ", ", key: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			e.indent = strings.Repeat(" ", int(max(v.AsInt(), 0)))
		case v.IsString():
			e.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an int or a string")
		}
		e.indented, e.item = true, ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || len(v.AsList().Items) != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		e.item, e.key = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	e.sortKeys = kwargs["sort_keys"].IsTruthy()
	e.ascii = kwargs["ensure_ascii"].IsTruthy()
	if err := e.value(args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(e.sb.String()), nil
}

// jsonEncoder writes Python json.dumps output.
type jsonEncoder struct {
	sb                strings.Builder
	item, key, indent string
	indented          bool
	sortKeys, ascii   bool
}

func (e *jsonEncoder) newline(depth int) {
	if e.indented {
		e.sb.WriteByte('\n')
		for range depth {
			e.sb.WriteString(e.indent)
		}
	}
}

func (e *jsonEncoder) value(v jinja.Value, depth int) error {
	switch {
	case v.IsUndefined():
		// Python raises here (jinja2's Undefined is not JSON serializable); printing null would hide a template bug.
		return errors.New("tojson: the value is undefined")
	case v.IsNone():
		e.sb.WriteString("null")
	case v.IsBool():
		e.sb.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		e.sb.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.sb.WriteString(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.sb.WriteString("[]")
			return nil
		}
		e.sb.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				e.sb.WriteString(e.item)
			}
			e.newline(depth + 1)
			if err := e.value(it, depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.sb.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if len(d.Keys) == 0 {
			e.sb.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if e.sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		e.sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				e.sb.WriteString(e.item)
			}
			e.newline(depth + 1)
			e.str(k)
			e.sb.WriteString(e.key)
			if err := e.value(d.Data[k], depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.sb.WriteByte('}')
	default:
		return fmt.Errorf("tojson: a %s value is not JSON serializable", v.String())
	}
	return nil
}

// str writes s as Python's json encoder does: ", \ and control characters escaped (\n \r \t \b \f, else
// \u00XX), everything else verbatim, or as \uXXXX (surrogate pairs above the BMP) with ensure_ascii.
func (e *jsonEncoder) str(s string) {
	const hex = "0123456789abcdef"
	u := func(r rune) {
		e.sb.WriteString(`\u`)
		for sh := 12; sh >= 0; sh -= 4 {
			e.sb.WriteByte(hex[(r>>sh)&0xf])
		}
	}
	e.sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			e.sb.WriteString(`\"`)
		case '\\':
			e.sb.WriteString(`\\`)
		case '\n':
			e.sb.WriteString(`\n`)
		case '\r':
			e.sb.WriteString(`\r`)
		case '\t':
			e.sb.WriteString(`\t`)
		case '\b':
			e.sb.WriteString(`\b`)
		case '\f':
			e.sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				u(r)
			case e.ascii && r > 0x7e && r <= 0xffff:
				u(r)
			case e.ascii && r > 0xffff:
				r -= 0x10000
				u(0xd800 | (r>>10)&0x3ff)
				u(0xdc00 | r&0x3ff)
			default:
				e.sb.WriteRune(r) // invalid UTF-8 (never from JSON input) becomes U+FFFD
			}
		}
	}
	e.sb.WriteByte('"')
}

// pyFloatRepr is Python's repr(float) as json.dumps writes it: the shortest round-trip digits, positional
// notation with at least one decimal for decimal exponents -4..15, scientific (two-digit exponent minimum)
// otherwise; NaN, Infinity and -Infinity for the non-finite values.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX: Go and Python agree on this form
	exp, _ := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}
