// Package domain_test holds the import-boundary test of the hexagonal layout: the domain depends only on
// the standard library and ports, and ports only on the standard library; adapters (tests included) never
// import the domain or app; the backends are siblings (adapters/cpu and adapters/mlx import nothing from each
// other, except that MLX's parity tests use the CPU reference as their oracle), and the model graphs
// (adapters/model) know no backend; distributed MLX (adapters/mlx/pipeline) reaches the backend only through
// its exports and the wire protocol (adapters/mlx/internal/ring), which knows no backend; below the MLX
// backend's sessions, its block ops (adapters/mlx/internal/ops) and graph (adapters/mlx/internal/graph) know
// neither the sessions nor each other's callers, and the graph no model; the two HTTP APIs
// are siblings too (adapters/openai and adapters/anthropic import nothing from each other, tests included),
// and the plumbing they share (adapters/httpapi) knows neither; the test-support checkpoint writers
// (internal/testmodel) and the local hub (adapters/hub/hubtest) are imported by _test.go files only; the CPU kernels' sub-packages (vector ops, worker
// pool, machine limits) are leaves below adapters/cpu/kernel, importing none of it; in app, the generation
// pipeline (app/generation) sits on the domain and its adapters alone, and serving (app/serve) and the harness
// (app/verify) each run it without importing each other or the wiring above them.
package domain_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/higgs-go/higgs"

// rule says which imports the files of one tree may have.
type rule struct {
	tree string   // directory relative to the module root
	skip []string // subtrees with their own rule
	// allowed reports whether a non-standard-library import is allowed (standard library imports always
	// are); test says whether the importing file is a _test.go file.
	allowed func(path string, test bool) bool
}

func within(path, tree string) bool { return path == tree || strings.HasPrefix(path, tree+"/") }

func testOnly(path string) bool {
	return within(path, "github.com/stretchr/testify") || within(path, module+"/ports/portfake") ||
		within(path, module+"/ports/porttest")
}

var rules = []rule{
	{tree: "domain", allowed: func(p string, test bool) bool {
		return p == module+"/ports" || within(p, module+"/domain") || (test && testOnly(p))
	}},
	{tree: "ports", skip: []string{"ports/portfake", "ports/porttest"}, allowed: func(p string, test bool) bool {
		return test && testOnly(p)
	}},
	{tree: "ports/portfake", allowed: func(p string, _ bool) bool { return p == module+"/ports" || testOnly(p) }},
	{tree: "ports/porttest", allowed: func(p string, _ bool) bool { return p == module+"/ports" || testOnly(p) }},
	{tree: "adapters", allowed: func(p string, _ bool) bool {
		return !within(p, module+"/domain") && !within(p, module+"/app") && !within(p, module+"/cmd")
	}},
	{tree: "adapters/cpu", allowed: func(p string, _ bool) bool { return !within(p, module+"/adapters/mlx") }},
	{tree: "adapters/mlx", allowed: func(p string, test bool) bool { return test || !within(p, module+"/adapters/cpu") }},
	// Distributed MLX: the processes (pipeline) reach the backend through its exports and the shared wire
	// protocol (internal/ring), which knows nothing of the backend.
	{tree: "adapters/mlx/pipeline", allowed: func(p string, test bool) bool {
		return test || within(p, module+"/adapters/mlx") || p == module+"/adapters/model" || p == module+"/ports" ||
			p == "github.com/rs/zerolog"
	}},
	{tree: "adapters/mlx/internal/ring", allowed: func(p string, test bool) bool {
		return test || p == module+"/adapters/mlx/internal/mlxc" || p == module+"/adapters/model" || p == module+"/ports"
	}},
	// The CPU kernels' sub-packages are leaves below kernel (so kernel can import them): the vector ops and the
	// worker pool import no higgs package, the machine limits only the pool; tests included.
	{tree: "adapters/cpu/kernel/vecmath", allowed: func(p string, _ bool) bool { return !within(p, module) }},
	{tree: "adapters/cpu/kernel/workers", allowed: func(p string, _ bool) bool { return !within(p, module) }},
	{tree: "adapters/cpu/kernel/machine", allowed: func(p string, _ bool) bool {
		return !within(p, module) || p == module+"/adapters/cpu/kernel/workers"
	}},
	// The MLX backend's layers below its sessions: the block ops (internal/ops) on one lazy graph
	// (internal/graph) on the bindings (internal/mlxc); neither knows the sessions, the graph no model.
	{tree: "adapters/mlx/internal/ops", allowed: func(p string, test bool) bool {
		return p == module+"/adapters/mlx/internal/graph" || p == module+"/adapters/mlx/internal/mlxc" ||
			p == module+"/adapters/model" || p == module+"/adapters/hfmodel" || p == module+"/adapters/safetensors" ||
			p == module+"/ports" || (test && testOnly(p))
	}},
	{tree: "adapters/mlx/internal/graph", allowed: func(p string, test bool) bool {
		return p == module+"/adapters/mlx/internal/mlxc" || p == module+"/adapters/hfmodel" || (test && testOnly(p))
	}},
	{tree: "adapters/model", allowed: func(p string, _ bool) bool {
		return !within(p, module+"/adapters/cpu") && !within(p, module+"/adapters/mlx")
	}},
	{tree: "adapters/openai", allowed: func(p string, _ bool) bool { return !within(p, module+"/adapters/anthropic") }},
	{tree: "adapters/anthropic", allowed: func(p string, _ bool) bool { return !within(p, module+"/adapters/openai") }},
	// The Responses API is a translation onto the chat completions path: of the project it imports only that
	// API and what it shares with it (tests included).
	{tree: "adapters/openai/responses", allowed: func(p string, _ bool) bool {
		return !within(p, module) || p == module+"/adapters/openai" || p == module+"/adapters/httpapi" ||
			p == module+"/adapters/toolcall" || p == module+"/ports"
	}},
	{tree: "adapters/httpapi", allowed: func(p string, _ bool) bool {
		return !within(p, module+"/adapters/openai") && !within(p, module+"/adapters/anthropic")
	}},
	// The application: one generation pipeline (app/generation) that the serving use case (app/serve) and the
	// harness (app/verify) both run and neither re-implements; loading (app/models) knows neither; only app
	// itself (configuration and wiring) and cmd put them together.
	{tree: "app/generation", allowed: func(p string, test bool) bool {
		return within(p, module+"/domain") || p == module+"/ports" || p == module+"/adapters/constrained" ||
			p == module+"/adapters/grammar" || p == module+"/adapters/sampling" || (test && testOnly(p))
	}},
	{tree: "app/models", allowed: func(p string, _ bool) bool { return !appUseCase(p) && p != module+"/app/generation" }},
	{tree: "app/serve", allowed: func(p string, _ bool) bool { return !appUseCase(p) || within(p, module+"/app/serve") }},
	{tree: "app/modeltools", allowed: func(p string, _ bool) bool {
		return !appUseCase(p) || within(p, module+"/app/verify") || within(p, module+"/app/modeltools")
	}},
	// Several models (app/fleet) are several serving use cases under one router: it knows app/serve alone,
	// never the wiring or an adapter.
	{tree: "app/fleet", allowed: func(p string, test bool) bool {
		return !within(p, module) || within(p, module+"/app/serve") || within(p, module+"/app/fleet") ||
			within(p, module+"/domain") || p == module+"/ports" ||
			(test && (p == module+"/app/internal/fakeengine" || testOnly(p)))
	}},
	{tree: "app/verify", allowed: func(p string, _ bool) bool { return !appUseCase(p) || within(p, module+"/app/verify") }},
	{tree: ".", allowed: func(p string, test bool) bool {
		return test || !within(p, module+"/internal/testmodel") && !within(p, module+"/adapters/hub/hubtest")
	}},
}

// appUseCase reports whether p is app's wiring or one of its use cases (serving, the harness), or cmd: what
// the use cases and the loading code below them never import.
func appUseCase(p string) bool {
	return p == module+"/app" || within(p, module+"/app/serve") || within(p, module+"/app/verify") || within(p, module+"/cmd")
}

// stdlib reports whether an import path belongs to the standard library: its first element has no dot.
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// violations parses every Go file under each rule's tree (imports only) and lists forbidden imports.
func violations(root string) ([]string, error) {
	var out []string
	for _, r := range rules {
		dir := filepath.Join(root, filepath.FromSlash(r.tree))
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				for _, s := range r.skip {
					if rel == s {
						return filepath.SkipDir
					}
				}
				if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != dir) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(rel, ".go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			test := strings.HasSuffix(rel, "_test.go")
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					return fmt.Errorf("%s: %w", rel, err)
				}
				if !stdlib(p) && !r.allowed(p, test) {
					out = append(out, fmt.Sprintf("%s imports %s", rel, p))
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return out, nil
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	root := filepath.Dir(filepath.Dir(file))
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(mod), "module "+module)
	return root
}

func TestImportBoundary(t *testing.T) {
	v, err := violations(moduleRoot(t))
	require.NoError(t, err)
	assert.Empty(t, v, "domain may import only the standard library and ports; ports only the standard library; "+
		"adapters never the domain, app or cmd; the backends not each other; adapters/model no backend; "+
		"the MLX backend's ops and graph not what sits above them; the HTTP APIs not each other; "+
		"adapters/httpapi no API; app/generation nothing above the domain's adapters; "+
		"app/serve and app/verify not each other nor app's wiring; app/models no use case; app/fleet only app/serve, the domain and ports")
}

// TestImportBoundaryDetectsViolations runs the checker over a synthetic tree, so a checker that accepts
// everything fails here.
func TestImportBoundaryDetectsViolations(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"domain/speculative/ok.go":              `package speculative; import ("context"; "github.com/higgs-go/higgs/ports")`,
		"domain/speculative/bad.go":             `package speculative; import "github.com/rs/zerolog"`,
		"domain/speculative/adapter.go":         `package speculative; import "github.com/higgs-go/higgs/adapters/cpu"`,
		"domain/speculative/x_test.go":          `package speculative; import ("github.com/stretchr/testify/require"; "github.com/higgs-go/higgs/ports/portfake")`,
		"domain/speculative/fake.go":            `package speculative; import "github.com/higgs-go/higgs/ports/portfake"`,
		"ports/target.go":                       `package ports; import ("context"; "errors")`,
		"ports/bad.go":                          `package ports; import "github.com/higgs-go/higgs/domain/speculative"`,
		"ports/portfake/fake.go":                `package portfake; import ("math/rand/v2"; "github.com/higgs-go/higgs/ports")`,
		"ports/porttest/suite.go":               `package porttest; import "github.com/stretchr/testify/require"`,
		"ports/porttest/bad.go":                 `package porttest; import "github.com/higgs-go/higgs/adapters/cpu"`,
		"adapters/openai/ok.go":                 `package openai; import "github.com/higgs-go/higgs/ports"`,
		"adapters/openai/bad_test.go":           `package openai; import "github.com/higgs-go/higgs/domain/speculative"`,
		"adapters/cpu/bad.go":                   `package cpu; import "github.com/higgs-go/higgs/adapters/mlx"`,
		"adapters/mlx/bad.go":                   `package mlx; import "github.com/higgs-go/higgs/adapters/cpu"`,
		"adapters/mlx/oracle_test.go":           `package mlx; import "github.com/higgs-go/higgs/adapters/cpu"`,
		"adapters/model/bad.go":                 `package model; import "github.com/higgs-go/higgs/adapters/cpu"`,
		"adapters/cpu/app.go":                   `package cpu; import "github.com/higgs-go/higgs/app"`,
		"app/fixture.go":                        `package app; import "github.com/higgs-go/higgs/internal/testmodel"`,
		"app/fixture_test.go":                   `package app; import "github.com/higgs-go/higgs/internal/testmodel"`,
		"adapters/cpu/x_test.go":                `package cpu; import "github.com/higgs-go/higgs/internal/testmodel"`,
		"app/models/hub.go":                     `package models; import "github.com/higgs-go/higgs/adapters/hub/hubtest"`,
		"app/models/hub_test.go":                `package models; import "github.com/higgs-go/higgs/adapters/hub/hubtest"`,
		"adapters/mlx/pipeline/ok.go":           `package pipeline; import ("github.com/higgs-go/higgs/adapters/mlx"; "github.com/higgs-go/higgs/adapters/mlx/internal/ring")`,
		"adapters/mlx/pipeline/bad.go":          `package pipeline; import "github.com/higgs-go/higgs/adapters/safetensors"`,
		"adapters/mlx/internal/ring/bad.go":     `package ring; import "github.com/higgs-go/higgs/adapters/mlx"`,
		"adapters/openai/ok_test.go":            `package openai; import "github.com/higgs-go/higgs/adapters/httpapi"`,
		"adapters/anthropic/x_test.go":          `package anthropic; import "github.com/higgs-go/higgs/adapters/openai"`,
		"adapters/openai/anthropic.go":          `package openai; import "github.com/higgs-go/higgs/adapters/anthropic"`,
		"adapters/httpapi/bad.go":               `package httpapi; import "github.com/higgs-go/higgs/adapters/openai"`,
		"adapters/openai/responses/ok.go":       `package responses; import ("github.com/higgs-go/higgs/adapters/openai"; "github.com/higgs-go/higgs/adapters/toolcall")`,
		"adapters/openai/responses/bad.go":      `package responses; import "github.com/higgs-go/higgs/adapters/constrained"`,
		"app/generation/ok.go":                  `package generation; import ("github.com/higgs-go/higgs/domain/speculative"; "github.com/higgs-go/higgs/adapters/constrained")`,
		"app/generation/bad.go":                 `package generation; import "github.com/higgs-go/higgs/adapters/cpu"`,
		"app/generation/serve.go":               `package generation; import "github.com/higgs-go/higgs/app/serve"`,
		"app/serve/ok.go":                       `package serve; import ("github.com/higgs-go/higgs/app/generation"; "github.com/higgs-go/higgs/app/models")`,
		"app/serve/bad.go":                      `package serve; import "github.com/higgs-go/higgs/app/verify"`,
		"app/verify/bad.go":                     `package verify; import "github.com/higgs-go/higgs/app/serve"`,
		"app/verify/wiring.go":                  `package verify; import "github.com/higgs-go/higgs/app"`,
		"app/models/bad.go":                     `package models; import "github.com/higgs-go/higgs/app/generation"`,
		"app/fleet/ok.go":                       `package fleet; import ("github.com/higgs-go/higgs/app/serve"; "github.com/higgs-go/higgs/domain/batch")`,
		"app/fleet/ok_test.go":                  `package fleet; import "github.com/higgs-go/higgs/app/internal/fakeengine"`,
		"app/fleet/bad.go":                      `package fleet; import "github.com/higgs-go/higgs/adapters/openai"`,
		"adapters/cpu/kernel/ok.go":             `package kernel; import "github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"`,
		"adapters/cpu/kernel/vecmath/bad.go":    `package vecmath; import "github.com/higgs-go/higgs/adapters/cpu/kernel"`,
		"adapters/cpu/kernel/workers/x_test.go": `package workers; import "github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"`,
		"adapters/cpu/kernel/machine/ok.go":     `package machine; import "github.com/higgs-go/higgs/adapters/cpu/kernel/workers"`,
		"adapters/cpu/kernel/machine/bad.go":    `package machine; import "github.com/higgs-go/higgs/adapters/cpu/kernel"`,
		"adapters/mlx/internal/ops/ok.go":       `package ops; import ("github.com/higgs-go/higgs/adapters/mlx/internal/graph"; "github.com/higgs-go/higgs/adapters/model")`,
		"adapters/mlx/internal/ops/bad.go":      `package ops; import "github.com/higgs-go/higgs/adapters/mlx"`,
		"adapters/mlx/internal/graph/ok.go":     `package graph; import "github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"`,
		"adapters/mlx/internal/graph/up.go":     `package graph; import "github.com/higgs-go/higgs/adapters/mlx/internal/ops"`,
	}
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	}
	v, err := violations(root)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{
		"domain/speculative/bad.go imports github.com/rs/zerolog",
		"domain/speculative/adapter.go imports github.com/higgs-go/higgs/adapters/cpu",
		"domain/speculative/fake.go imports github.com/higgs-go/higgs/ports/portfake",
		"ports/bad.go imports github.com/higgs-go/higgs/domain/speculative",
		"ports/porttest/bad.go imports github.com/higgs-go/higgs/adapters/cpu",
		"adapters/openai/bad_test.go imports github.com/higgs-go/higgs/domain/speculative",
		"adapters/cpu/bad.go imports github.com/higgs-go/higgs/adapters/mlx",
		"app/generation/bad.go imports github.com/higgs-go/higgs/adapters/cpu",
		"app/generation/serve.go imports github.com/higgs-go/higgs/app/serve",
		"app/serve/bad.go imports github.com/higgs-go/higgs/app/verify",
		"app/verify/bad.go imports github.com/higgs-go/higgs/app/serve",
		"app/verify/wiring.go imports github.com/higgs-go/higgs/app",
		"app/models/bad.go imports github.com/higgs-go/higgs/app/generation",
		"app/fleet/bad.go imports github.com/higgs-go/higgs/adapters/openai",
		"adapters/mlx/bad.go imports github.com/higgs-go/higgs/adapters/cpu",
		"adapters/model/bad.go imports github.com/higgs-go/higgs/adapters/cpu",
		"adapters/cpu/app.go imports github.com/higgs-go/higgs/app",
		"app/fixture.go imports github.com/higgs-go/higgs/internal/testmodel",
		"app/models/hub.go imports github.com/higgs-go/higgs/adapters/hub/hubtest",
		"adapters/mlx/pipeline/bad.go imports github.com/higgs-go/higgs/adapters/safetensors",
		"adapters/mlx/internal/ring/bad.go imports github.com/higgs-go/higgs/adapters/mlx",
		"adapters/mlx/internal/ops/bad.go imports github.com/higgs-go/higgs/adapters/mlx",
		"adapters/mlx/internal/graph/up.go imports github.com/higgs-go/higgs/adapters/mlx/internal/ops",
		"adapters/anthropic/x_test.go imports github.com/higgs-go/higgs/adapters/openai",
		"adapters/openai/anthropic.go imports github.com/higgs-go/higgs/adapters/anthropic",
		"adapters/httpapi/bad.go imports github.com/higgs-go/higgs/adapters/openai",
		"adapters/openai/responses/bad.go imports github.com/higgs-go/higgs/adapters/constrained",
		"adapters/cpu/kernel/vecmath/bad.go imports github.com/higgs-go/higgs/adapters/cpu/kernel",
		"adapters/cpu/kernel/workers/x_test.go imports github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath",
		"adapters/cpu/kernel/machine/bad.go imports github.com/higgs-go/higgs/adapters/cpu/kernel",
	}, v)
}
