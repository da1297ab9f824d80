package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const header = `
/* Copyright */
#ifndef X
#define X
#include "mlx/c/array.h"
typedef void (*mlx_error_handler_func)(const char* msg, void* data);
/**
 * Doc.
 */
int mlx_add(
    mlx_array* res,
    const mlx_array a,
    const mlx_array b /* may be null */,
    const mlx_stream s);
void mlx_set_error_handler(
    mlx_error_handler_func handler,
    void* data,
    void (*dtor)(void*));
const int* mlx_array_shape(const mlx_array arr);
mlx_array mlx_array_new(void);
static mlx_array mlx_array_empty;
#ifdef __cplusplus
}
#endif
`

func TestParse(t *testing.T) {
	ps := map[string]proto{}
	for _, p := range parse(header) {
		ps[p.name] = p
	}
	tests := []struct{ name, sig string }{
		{"mlx_add", "(res *Array, a Array, b Array, s Stream) int32"},
		{"mlx_set_error_handler", "(handler uintptr, data unsafe.Pointer, dtor uintptr)"},
		{"mlx_array_shape", "(arr Array) *int32"},
		{"mlx_array_new", "() Array"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := ps[tc.name]
			require.True(t, ok, "parsed: %v", ps)
			sig, err := signature(p)
			require.NoError(t, err)
			assert.Equal(t, tc.sig, sig)
		})
	}
	assert.NotContains(t, ps, "mlx_array_empty")
}

func TestUnmappedType(t *testing.T) {
	ps := parse("int mlx_weird(struct foo* x);")
	require.Len(t, ps, 1)
	_, err := signature(ps[0])
	assert.ErrorContains(t, err, "no Go mapping")
}

func TestGoName(t *testing.T) {
	assert.Equal(t, "FastRmsNorm", goName("mlx_fast_rms_norm"))
	assert.Equal(t, "Add", goName("mlx_add"))
}

func FuzzParse(f *testing.F) {
	f.Add(header)
	f.Add("int mlx_f(int (*cb)(int), const char* s);")
	f.Fuzz(func(t *testing.T, src string) {
		for _, p := range parse(src) {
			_, _ = signature(p)
		}
	})
}

// With MLXC_SRC pointing at the pinned mlx-c checkout, the committed table must be what the generator
// writes (CI has no headers and skips).
func TestTableUpToDate(t *testing.T) {
	src := os.Getenv("MLXC_SRC")
	if src == "" {
		t.Skip("MLXC_SRC not set: no mlx-c headers to regenerate the table from")
	}
	want, err := generate(src)
	require.NoError(t, err)
	got, err := os.ReadFile("../zz_table.go")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "zz_table.go is stale: run go generate ./adapters/mlx/internal/mlxc")
}
