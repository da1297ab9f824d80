// Command gen writes the purego function table of package mlxc from a checkout of mlx-c's public headers.
//
//	go run ./adapters/mlx/internal/mlxc/gen -mlxc /path/to/mlx-c -out adapters/mlx/internal/mlxc/zz_table.go
//
// It reads the prototypes of the functions listed in wanted from <mlxc>/mlx/c/*.h, maps each C parameter type to
// the Go type that has the same calling convention (every mlx-c handle is a struct holding one pointer, passed
// and returned in one integer register like a uintptr; mlx_optional_{int,float} are 8-byte structs classified
// INTEGER, passed as one uint64), and fails on any prototype it cannot map, so a header change surfaces here and
// not as a crash. It also records the pinned mlx-c and MLX versions read from <mlxc>/CMakeLists.txt. The headers
// are not part of this repository.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// wanted lists the mlx-c functions the backend calls. Add a name here and re-run the generator.
var wanted = []string{
	// strings, version, errors
	"mlx_string_new", "mlx_string_data", "mlx_string_free", "mlx_version", "mlx_set_error_handler",
	// arrays
	"mlx_array_new", "mlx_array_free", "mlx_array_new_data", "mlx_array_new_float32", "mlx_array_new_int",
	"mlx_array_set", "mlx_array_size", "mlx_array_ndim", "mlx_array_shape", "mlx_array_dtype", "mlx_array_eval",
	"mlx_array_item_int32", "mlx_array_data_int32", "mlx_array_data_float32", "mlx_array_data_uint32",
	// vectors of arrays
	"mlx_vector_array_new", "mlx_vector_array_free", "mlx_vector_array_append_value", "mlx_vector_array_size",
	"mlx_vector_array_get",
	// devices, streams, evaluation
	"mlx_default_cpu_stream_new", "mlx_default_gpu_stream_new", "mlx_stream_free", "mlx_device_new_type",
	"mlx_device_free", "mlx_set_default_device", "mlx_synchronize", "mlx_eval", "mlx_get_active_memory", "mlx_get_peak_memory",
	"mlx_get_cache_memory", "mlx_clear_cache",
	// ops
	"mlx_add", "mlx_subtract", "mlx_multiply", "mlx_divide", "mlx_matmul", "mlx_reshape", "mlx_transpose_axes",
	"mlx_astype", "mlx_quantized_matmul", "mlx_gather_qmm", "mlx_gather_mm", "mlx_take_axis", "mlx_take_along_axis",
	"mlx_concatenate_axis", "mlx_slice", "mlx_slice_update", "mlx_argmax_axis", "mlx_sigmoid", "mlx_tanh", "mlx_exp",
	"mlx_log1p", "mlx_abs", "mlx_softmax_axis", "mlx_sum_axis", "mlx_square", "mlx_sqrt", "mlx_rsqrt",
	"mlx_maximum", "mlx_negative", "mlx_expand_dims", "mlx_squeeze_axis", "mlx_argsort_axis", "mlx_broadcast_to",
	"mlx_argpartition_axis", "mlx_max_axis", "mlx_logsumexp_axis",
	"mlx_contiguous", "mlx_copy", "mlx_zeros", "mlx_dequantize",
	// fast ops
	"mlx_fast_rms_norm", "mlx_fast_rope", "mlx_fast_scaled_dot_product_attention",
	// distributed (pipeline parallelism over MLX's own backends: ring, JACCL, MPI)
	"mlx_distributed_is_available", "mlx_distributed_init", "mlx_distributed_group_new",
	"mlx_distributed_group_free", "mlx_distributed_group_rank", "mlx_distributed_group_size",
	"mlx_distributed_group_split", "mlx_distributed_send", "mlx_distributed_recv", "mlx_distributed_recv_like",
	"mlx_distributed_all_sum", "mlx_distributed_all_gather",
}

// goType maps a C parameter or return type (qualifiers stripped, spaces normalised) to its Go form.
var goType = map[string]string{
	"int": "int32", "bool": "bool", "float": "float32", "double": "float64", "size_t": "uintptr", "void": "",
	"int32_t": "int32", "uint32_t": "uint32",
	"int*": "*int32", "int32_t*": "*int32", "uint32_t*": "*uint32", "float*": "*float32", "size_t*": "*uintptr",
	"void*": "unsafe.Pointer", "char*": "*byte",
	"mlx_array": "Array", "mlx_array*": "*Array", "mlx_stream": "Stream", "mlx_device": "Device",
	"mlx_vector_array": "VectorArray", "mlx_vector_array*": "*VectorArray", "mlx_string": "String",
	"mlx_string*": "*String", "mlx_dtype": "Dtype", "mlx_device_type": "DeviceType",
	"mlx_optional_int": "OptionalInt", "mlx_optional_float": "OptionalFloat", "mlx_optional_dtype": "OptionalDtype",
	"mlx_error_handler_func": "uintptr", "funcptr": "uintptr",
	"mlx_distributed_group": "Group", "mlx_distributed_group*": "*Group",
}

type proto struct {
	name   string
	ret    string
	params []param
}

type param struct{ name, ctype string }

func main() {
	root := flag.String("mlxc", "", "mlx-c source checkout (holds CMakeLists.txt and mlx/c/*.h)")
	out := flag.String("out", "", "output Go file")
	flag.Parse()
	if *root == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -mlxc <mlx-c checkout> -out <file.go>")
		os.Exit(2)
	}
	src, err := generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

var (
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	lineComment  = regexp.MustCompile(`//[^\n]*`)
	preproc      = regexp.MustCompile(`(?m)^\s*#.*$`)
	funcPtr      = regexp.MustCompile(`\w+\s*\**\s*\(\s*\*\s*(\w+)\s*\)\s*\([^)]*\)`)
	cVersion     = regexp.MustCompile(`set\(MLX_C_VERSION\s+([0-9.]+)\)`)
	mlxTag       = regexp.MustCompile(`GIT_TAG\s+v?([0-9.]+)`)
)

func generate(root string) ([]byte, error) {
	cm, err := os.ReadFile(filepath.Join(root, "CMakeLists.txt"))
	if err != nil {
		return nil, err
	}
	cv, mv := cVersion.FindSubmatch(cm), mlxTag.FindSubmatch(cm)
	if cv == nil || mv == nil {
		return nil, fmt.Errorf("%s: no MLX_C_VERSION or MLX GIT_TAG", filepath.Join(root, "CMakeLists.txt"))
	}
	headers, err := filepath.Glob(filepath.Join(root, "mlx", "c", "*.h"))
	if err != nil || len(headers) == 0 {
		return nil, fmt.Errorf("no headers under %s/mlx/c (%v)", root, err)
	}
	sort.Strings(headers)
	protos := map[string]proto{}
	for _, h := range headers {
		b, err := os.ReadFile(h)
		if err != nil {
			return nil, err
		}
		for _, p := range parse(string(b)) {
			protos[p.name] = p
		}
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "// Code generated by adapters/mlx/internal/mlxc/gen from mlx-c %s headers (MLX %s); DO NOT EDIT.\n\n", cv[1], mv[1])
	buf.WriteString("package mlxc\n\nimport \"unsafe\"\n\nvar _ unsafe.Pointer\n\n")
	fmt.Fprintf(&buf, "// HeaderVersion is the mlx-c version whose headers produced this table.\nconst HeaderVersion = %q\n\n", cv[1])
	fmt.Fprintf(&buf, "// MLXVersion is the MLX version that mlx-c release pins; the loaded library must report it.\nconst MLXVersion = %q\n\n", mv[1])
	buf.WriteString("var (\n")
	for _, n := range wanted {
		p, ok := protos[n]
		if !ok {
			return nil, fmt.Errorf("%s: no prototype in %s/mlx/c/*.h", n, root)
		}
		sig, err := signature(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		fmt.Fprintf(&buf, "\t// %s is %s.\n\t%s func%s\n", goName(n), n, goName(n), sig)
	}
	buf.WriteString(")\n\n// table binds every function variable to its symbol name.\nvar table = []symbol{\n")
	for _, n := range wanted {
		fmt.Fprintf(&buf, "\t{%q, &%s},\n", n, goName(n))
	}
	buf.WriteString("}\n")
	return format.Source(buf.Bytes())
}

// parse returns the function prototypes declared in one header.
func parse(src string) []proto {
	src = blockComment.ReplaceAllString(src, " ")
	src = lineComment.ReplaceAllString(src, " ")
	src = preproc.ReplaceAllString(src, " ")
	src = funcPtr.ReplaceAllString(src, "funcptr $1")
	var res []proto
	for _, st := range strings.Split(src, ";") {
		st = strings.Join(strings.Fields(st), " ")
		if i := strings.LastIndexAny(st, "{}"); i >= 0 {
			st = strings.TrimSpace(st[i+1:])
		}
		open := strings.IndexByte(st, '(')
		if open < 0 || !strings.HasSuffix(st, ")") || strings.HasPrefix(st, "typedef") || strings.HasPrefix(st, "static") {
			continue
		}
		head := strings.TrimSpace(st[:open])
		k := strings.LastIndexAny(head, " *")
		if k < 0 {
			continue
		}
		p := proto{name: head[k+1:], ret: normType(head[:k+1])}
		if !strings.HasPrefix(p.name, "mlx_") {
			continue
		}
		args := strings.TrimSpace(st[open+1 : len(st)-1])
		if args != "" && args != "void" {
			for _, a := range strings.Split(args, ",") {
				a = strings.TrimSpace(a)
				j := strings.LastIndexAny(a, " *")
				if j < 0 {
					p.params = append(p.params, param{name: "", ctype: normType(a)})
					continue
				}
				p.params = append(p.params, param{name: a[j+1:], ctype: normType(a[:j+1])})
			}
		}
		res = append(res, p)
	}
	return res
}

// normType drops const and spaces: "const mlx_array *" → "mlx_array*".
func normType(t string) string {
	t = strings.ReplaceAll(t, "const ", "")
	t = strings.TrimPrefix(strings.TrimSpace(t), "const")
	return strings.ReplaceAll(strings.TrimSpace(t), " ", "")
}

var goKeywords = map[string]bool{"type": true, "func": true, "map": true, "range": true, "string": true, "len": true}

func signature(p proto) (string, error) {
	var ps []string
	for i, a := range p.params {
		g, ok := goType[a.ctype]
		if !ok || g == "" {
			return "", fmt.Errorf("parameter %q: C type %q has no Go mapping", a.name, a.ctype)
		}
		n := a.name
		if n == "" || goKeywords[n] {
			n = fmt.Sprintf("%s%d", "p", i)
		}
		ps = append(ps, n+" "+g)
	}
	r, ok := goType[p.ret]
	if !ok {
		return "", fmt.Errorf("return type %q has no Go mapping", p.ret)
	}
	s := "(" + strings.Join(ps, ", ") + ")"
	if r != "" {
		s += " " + r
	}
	return s, nil
}

// goName turns mlx_fast_rms_norm into FastRmsNorm.
func goName(c string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.TrimPrefix(c, "mlx_"), "_") {
		if w == "" {
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}
