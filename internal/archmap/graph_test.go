package archmap

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/higgs-go/higgs"

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// graphBlock is the code block of ARCHITECTURE.md's "## Import graph" section.
func graphBlock(doc string) (string, error) {
	_, sec, ok := strings.Cut(doc, "\n## Import graph\n")
	if !ok {
		return "", fmt.Errorf(`ARCHITECTURE.md has no "## Import graph" section`)
	}
	_, rest, ok := strings.Cut(sec, "```\n")
	if !ok {
		return "", fmt.Errorf("the import graph section has no code block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		return "", fmt.Errorf("the import graph's code block is not closed")
	}
	return block, nil
}

var (
	entry   = regexp.MustCompile(`^(\S+)\s+→\s*(.*)$`)
	bracket = regexp.MustCompile(`\[[^\]]*\]|\([^)]*\)`)
	braces  = regexp.MustCompile(`^([^{]*)\{([^}]*)\}$`)
)

// parseGraph reads the graph's lines: "PKG → A, B/{C, D}" (a package's project imports; "—" for none;
// third-party modules in brackets and remarks in parentheses are ignored), continued on indented lines.
func parseGraph(block string) (map[string][]string, error) {
	graph := map[string][]string{}
	var cur string
	var rhs []string
	flush := func() error {
		if cur == "" {
			return nil
		}
		if _, dup := graph[cur]; dup {
			return fmt.Errorf("%s has two lines", cur)
		}
		deps, err := expand(strings.Join(rhs, " "))
		if err != nil {
			return fmt.Errorf("%s: %w", cur, err)
		}
		graph[cur] = deps
		return nil
	}
	for _, ln := range strings.Split(block, "\n") {
		switch m := entry.FindStringSubmatch(ln); {
		case strings.TrimSpace(ln) == "":
		case m != nil:
			if err := flush(); err != nil {
				return nil, err
			}
			cur, rhs = m[1], []string{m[2]}
		case cur != "" && strings.HasPrefix(ln, " "):
			rhs = append(rhs, strings.TrimSpace(ln))
		default:
			return nil, fmt.Errorf("unreadable line %q", ln)
		}
	}
	return graph, flush()
}

// expand turns "A, B/{C, D}, —" into [A B/C B/D], sorted.
func expand(s string) ([]string, error) {
	s = bracket.ReplaceAllString(s, "")
	var out []string
	depth, start := 0, 0
	var items []string
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	items = append(items, s[start:])
	for _, it := range items {
		it = strings.TrimSpace(it)
		switch {
		case it == "" || it == "—":
		case strings.Contains(it, "{"):
			m := braces.FindStringSubmatch(it)
			if m == nil {
				return nil, fmt.Errorf("unreadable item %q", it)
			}
			for _, sub := range strings.Split(m[2], ",") {
				out = append(out, m[1]+strings.TrimSpace(sub))
			}
		default:
			out = append(out, it)
		}
	}
	slices.Sort(out)
	return out, nil
}

// actual is every project package's project imports (non-test files), from go list.
func actual(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	got := map[string][]string{}
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imps, _ := strings.Cut(ln, "|")
		var deps []string
		for _, i := range strings.Fields(imps) {
			if rel, ok := strings.CutPrefix(i, module+"/"); ok {
				deps = append(deps, rel)
			}
		}
		slices.Sort(deps)
		got[strings.TrimPrefix(pkg, module+"/")] = deps
	}
	return got
}

// differences lists where the drawn graph and the code disagree.
func differences(drawn, code map[string][]string) []string {
	var out []string
	for pkg, deps := range code {
		d, ok := drawn[pkg]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s is not in the graph (it imports %v)", pkg, deps))
		case !slices.Equal(d, deps):
			out = append(out, fmt.Sprintf("%s: the graph says %v, the code imports %v", pkg, d, deps))
		}
	}
	for pkg := range drawn {
		if _, ok := code[pkg]; !ok {
			out = append(out, fmt.Sprintf("%s is in the graph but is no package", pkg))
		}
	}
	slices.Sort(out)
	return out
}

// ARCHITECTURE.md's import graph names every package with exactly the project packages it imports.
func TestImportGraphIsTrue(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	require.NoError(t, err)
	block, err := graphBlock(string(doc))
	require.NoError(t, err)
	drawn, err := parseGraph(block)
	require.NoError(t, err)
	assert.Empty(t, differences(drawn, actual(t, root)), "update ARCHITECTURE.md's import graph")
}

// The checker finds a missing package, a wrong line and a package that does not exist.
func TestImportGraphDetectsDisagreement(t *testing.T) {
	drawn, err := parseGraph("a   → b/{c, d}, e   [zerolog]\n" +
		"b/c → —\n" +
		"x   → e,\n" +
		"      b/c   (a remark)\n")
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"a": {"b/c", "b/d", "e"}, "b/c": nil, "x": {"b/c", "e"}}, drawn)
	code := map[string][]string{"a": {"b/c", "e"}, "b/c": nil, "b/d": {"e"}}
	assert.Equal(t, []string{
		"a: the graph says [b/c b/d e], the code imports [b/c e]",
		"b/d is not in the graph (it imports [e])",
		"x is in the graph but is no package",
	}, differences(drawn, code))
	_, err = parseGraph("a → b\na → c\n")
	assert.ErrorContains(t, err, "two lines")
	_, err = parseGraph("a → b/{c\n")
	assert.Error(t, err)
}
