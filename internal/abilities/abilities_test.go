package abilities_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// interfaces are the optional abilities the tables may name.
var interfaces = map[string]reflect.Type{
	"ports.TapeReplayer":    reflect.TypeFor[ports.TapeReplayer](),
	"ports.PrefixExporter":  reflect.TypeFor[ports.PrefixExporter](),
	"ports.PrefixCodec":     reflect.TypeFor[ports.PrefixCodec](),
	"ports.HostTaps":        reflect.TypeFor[ports.HostTaps](),
	"ports.BatchForwarder":  reflect.TypeFor[ports.BatchForwarder](),
	"ports.BatchDrafter":    reflect.TypeFor[ports.BatchDrafter](),
	"ports.SamplingDrafter": reflect.TypeFor[ports.SamplingDrafter](),
	"ports.TreeVerifier":    reflect.TypeFor[ports.TreeVerifier](),
	"ports.TopDrafter":      reflect.TypeFor[ports.TopDrafter](),
	"ports.PlainEncoder":    reflect.TypeFor[ports.PlainEncoder](),
	"ports.TokenBytes":      reflect.TypeFor[ports.TokenBytes](),
	"ports.PositionRand":    reflect.TypeFor[ports.PositionRand](),
	"ports.TokenCounter":    reflect.TypeFor[ports.TokenCounter](),
	"ports.PromptTokenizer": reflect.TypeFor[ports.PromptTokenizer](),
	"ports.MemoryPricer":    reflect.TypeFor[ports.MemoryPricer](),
	"ports.Embedder":        reflect.TypeFor[ports.Embedder](),
	"ports.TextEmbedder":    reflect.TypeFor[ports.TextEmbedder](),
}

// row is one line of a table: the ability, what it is asked of, and the remaining cells by column name.
type row struct {
	line          int
	ability, what string
	cells         map[string]string
}

// backends are the columns of the backend table, each mapping "asked of" to the value checked.
type backends map[string]map[string]any

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// parseTables reads the tables of ARCHITECTURE.md's "Optional abilities" section: the backend table (with a
// portfake column) and the table of the other ports' abilities (with an "implemented by" column).
func parseTables(doc string) (backend, other []row, err error) {
	_, sec, ok := strings.Cut(doc, "\n## Optional abilities\n")
	if !ok {
		return nil, nil, fmt.Errorf("ARCHITECTURE.md has no \"## Optional abilities\" section")
	}
	start := strings.Count(doc, "\n") - strings.Count(sec, "\n") + 1
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var header []string
	var cur *[]row
	for i, ln := range strings.Split(sec, "\n") {
		ln = strings.TrimSpace(ln)
		if !strings.HasPrefix(ln, "|") {
			header, cur = nil, nil
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(ln, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		switch {
		case header == nil:
			header = cells
			if len(cells) < 3 || cells[0] != "ability" || cells[1] != "asked of" {
				return nil, nil, fmt.Errorf("line %d: a table must start with the columns \"ability | asked of\"", start+i)
			}
			cur = &other
			if slices.Contains(cells, "portfake") {
				cur = &backend
			}
		case strings.HasPrefix(cells[0], "---"):
		default:
			if len(cells) != len(header) {
				return nil, nil, fmt.Errorf("line %d: %d cells for %d columns", start+i, len(cells), len(header))
			}
			r := row{line: start + i, ability: strings.Trim(cells[0], "`"), what: cells[1], cells: map[string]string{}}
			for j := 2; j < len(cells); j++ {
				r.cells[header[j]] = cells[j]
			}
			*cur = append(*cur, r)
		}
	}
	if len(backend) == 0 || len(other) == 0 {
		return nil, nil, fmt.Errorf("the section needs a backend table (with a portfake column) and a table of the other ports' abilities")
	}
	return backend, other, nil
}

// checkBackends lists every cell of the backend table the code contradicts.
func checkBackends(rows []row, bs backends) []string {
	var out []string
	for _, r := range rows {
		it, ok := interfaces[r.ability]
		if !ok {
			out = append(out, fmt.Sprintf("line %d: %s is not an ability this test knows (add it to interfaces)", r.line, r.ability))
			continue
		}
		for name, objs := range bs {
			cell, ok := r.cells[name]
			if !ok {
				out = append(out, fmt.Sprintf("line %d: no %s column", r.line, name))
				continue
			}
			v, ok := objs[r.what]
			if !ok {
				out = append(out, fmt.Sprintf("line %d: %q is not something a backend offers (one of %v)", r.line, r.what, keys(objs)))
				continue
			}
			has := reflect.TypeOf(v).Implements(it)
			switch {
			case strings.HasPrefix(cell, "yes") && !has:
				out = append(out, fmt.Sprintf("line %d: the table says %s's %s (%T) implements %s; it does not", r.line, name, r.what, v, r.ability))
			case strings.HasPrefix(cell, "no") && has:
				out = append(out, fmt.Sprintf("line %d: the table says %s's %s (%T) lacks %s; it implements it", r.line, name, r.what, v, r.ability))
			case !strings.HasPrefix(cell, "yes") && !strings.HasPrefix(cell, "no"):
				out = append(out, fmt.Sprintf("line %d: %s cell %q starts with neither yes nor no", r.line, name, cell))
			}
		}
	}
	return out
}

// implementer is an "implemented by" entry: `dir.Type`, with dir relative to the module root.
var implementer = regexp.MustCompile("`([a-z/]+)\\.([A-Z][A-Za-z]*)`")

// checkOthers lists every row of the other abilities' table whose implementers lack the compile-time
// assertion `_ ports.X = (*Type)(nil)` in their package (which, compiling, proves the implementation).
func checkOthers(root string, rows []row) []string {
	var out []string
	for _, r := range rows {
		if _, ok := interfaces[r.ability]; !ok {
			out = append(out, fmt.Sprintf("line %d: %s is not an ability this test knows (add it to interfaces)", r.line, r.ability))
			continue
		}
		ms := implementer.FindAllStringSubmatch(r.cells["implemented by"], -1)
		if len(ms) == 0 {
			out = append(out, fmt.Sprintf("line %d: %s names no implementer as `dir.Type`", r.line, r.ability))
		}
		for _, m := range ms {
			dir, typ := m[1], m[2]
			assert := regexp.MustCompile(`_\s+` + regexp.QuoteMeta(r.ability) + `\s*=\s*\(\*` + typ + `\)\(nil\)`)
			files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.go"))
			found := false
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				b, err := os.ReadFile(f)
				if err == nil && assert.Match(b) {
					found = true
					break
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("line %d: %s has no `var _ %s = (*%s)(nil)` in %s", r.line, m[0], r.ability, typ, dir))
			}
		}
	}
	return out
}

// asserted is every ports interface that non-test code outside ports type-asserts (v.(ports.X)).
func asserted(t *testing.T, root string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, tree := range []string{"app", "adapters", "domain", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, tree), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ta, ok := n.(*ast.TypeAssertExpr)
				if !ok || ta.Type == nil {
					return true
				}
				if sel, ok := ta.Type.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "ports" {
						set["ports."+sel.Sel.Name] = true
					}
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	return keys(set)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// loadBackends opens what each backend column is checked against: portfake's toy target (with tapes) and
// scripted drafter, a synthetic hybrid CPU target with its DFlash drafter, and the MLX backend's types.
func loadBackends(t *testing.T) backends {
	ctx := t.Context()
	pf := portfake.MustNew(portfake.Config{Tape: true})
	pfd, err := portfake.NewDrafter(portfake.DrafterConfig{Propose: portfake.Fixed(1)})
	require.NoError(t, err)

	ct, err := cpu.Load(ctx, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 41}), cpu.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ct.Close() })
	cd, err := cpu.LoadDrafter(ctx, testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 42, Taps: []int{1, 3}, Mask: 60}), ct, cpu.DrafterOptions{})
	require.NoError(t, err)

	bs := backends{}
	for name, p := range map[string]struct {
		t ports.Target
		d ports.Drafter
	}{"portfake": {pf, pfd}, "cpu": {ct, cd}} {
		sess, err := p.t.NewSession(ctx, p.d.TapLayers())
		require.NoError(t, err)
		t.Cleanup(func() { _ = sess.Close() })
		fr, err := sess.Forward(ctx, []ports.Token{1, 2, 3}, ports.ForwardOptions{Taps: true})
		require.NoError(t, err)
		ds, err := p.d.NewSession(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ds.Close() })
		bs[name] = map[string]any{"target": p.t, "target session": sess, "taps": fr.Taps, "drafter": p.d, "draft session": ds}
	}
	// MLX by type: what Load, NewSession, Forward, LoadDrafter and Drafter.NewSession return (no libmlxc here).
	bs["mlx"] = map[string]any{"target": (*mlx.Target)(nil), "target session": (*mlx.Session)(nil), "taps": (*mlx.Taps)(nil),
		"drafter": (*mlx.Drafter)(nil), "draft session": (*mlx.DraftSession)(nil)}
	return bs
}

// TestAbilitiesTable: ARCHITECTURE.md's tables of optional abilities say what the code does, and name every
// ports interface the code finds by type assertion.
func TestAbilitiesTable(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	require.NoError(t, err)
	backend, other, err := parseTables(string(doc))
	require.NoError(t, err)

	assert.Empty(t, checkBackends(backend, loadBackends(t)), "ARCHITECTURE.md's backend abilities disagree with the code")
	assert.Empty(t, checkOthers(root, other), "ARCHITECTURE.md's other abilities disagree with the code")

	named := map[string]bool{}
	for _, r := range append(slices.Clone(backend), other...) {
		named[r.ability] = true
	}
	for _, a := range asserted(t, root) {
		assert.True(t, named[a], "the code finds %s by type assertion: give it a row in ARCHITECTURE.md's \"Optional abilities\"", a)
	}
}

// TestAbilitiesTableDetectsDisagreement runs the checks on tables that contradict the code, so a checker that
// accepts everything fails here.
func TestAbilitiesTableDetectsDisagreement(t *testing.T) {
	doc := "intro\n## Optional abilities\n\n" +
		"| ability | asked of | used for | portfake | cpu | mlx |\n| --- | --- | --- | --- | --- | --- |\n" +
		"| `ports.TapeReplayer` | target session | x | yes | yes | yes |\n" + // true
		"| `ports.HostTaps` | taps | x | yes | yes | yes |\n" + // portfake's taps have no Host
		"| `ports.SamplingDrafter` | draft session | x | no | no | yes |\n" + // the CPU draft session has it
		"| `ports.Imagined` | target | x | yes | yes | yes |\n" +
		"\n| ability | asked of | used for | implemented by |\n| --- | --- | --- | --- |\n" +
		"| `ports.TokenBytes` | tokenizer | x | `adapters/tokenizer.Tokenizer` |\n" + // true
		"| `ports.PositionRand` | rand | x | `adapters/tokenizer.Tokenizer` |\n" + // not there
		"\n## Next\n"
	backend, other, err := parseTables(doc)
	require.NoError(t, err)
	require.Len(t, backend, 4)
	require.Len(t, other, 2)
	got := append(checkBackends(backend, loadBackends(t)), checkOthers(moduleRoot(t), other)...)
	want := []string{
		"line 7: the table says portfake's taps (*portfake.Taps) implements ports.HostTaps; it does not",
		"line 8: the table says cpu's draft session (*cpu.DraftSession) lacks ports.SamplingDrafter; it implements it",
		"line 9: ports.Imagined is not an ability this test knows (add it to interfaces)",
		"line 14: `adapters/tokenizer.Tokenizer` has no `var _ ports.PositionRand = (*Tokenizer)(nil)` in adapters/tokenizer",
	}
	assert.ElementsMatch(t, want, got)

	_, _, err = parseTables("\n## Optional abilities\n| ability | asked of | x |\n| --- | --- | --- |\n| a | b |\n")
	assert.ErrorContains(t, err, "2 cells for 3 columns")
}
