// Package readme reads the shell commands a Markdown file shows, so that tests can run every command the
// README gives and keep it true. It is a test helper: only _test files import it.
package readme

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// Block is one code block: fenced (Lang is its info string; the fence may be indented by up to three spaces, as
// inside a list item, and that indentation is removed from its lines) or indented by four spaces (Lang "indented").
type Block struct {
	Lang string
	Line int // first line of its text, 1-based
	Text string
}

// Command is one simple command of a shell block, its words expanded as a shell would (quotes removed,
// ~ and $HOME expanded from env).
type Command struct {
	Line  int // line in the Markdown file
	Args  []string
	Block int // index of its block in Blocks' result
}

// Blocks returns the code blocks of the Markdown file at path, in order.
func Blocks(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Block
	var cur *Block
	var text strings.Builder
	fenced := false
	sc := bufio.NewScanner(f)
	flush := func() {
		if cur != nil {
			cur.Text = text.String()
			out = append(out, *cur)
			cur = nil
			text.Reset()
		}
	}
	indent := 0 // a fence's indentation (up to 3 spaces, as in a list item), stripped from its lines
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		fence := len(line)-len(trimmed) <= 3 && strings.HasPrefix(trimmed, "```")
		switch {
		case fenced && fence:
			flush()
			fenced = false
		case fenced:
			for i := 0; i < indent && strings.HasPrefix(line, " "); i++ {
				line = line[1:]
			}
			text.WriteString(line + "\n")
		case fence:
			flush()
			fenced = true
			indent = len(line) - len(trimmed)
			cur = &Block{Lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), Line: n + 1}
		case strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "":
			if cur == nil {
				cur = &Block{Lang: "indented", Line: n}
			}
			text.WriteString(strings.TrimPrefix(line, "    ") + "\n")
		case cur != nil && strings.TrimSpace(line) == "":
			text.WriteString("\n")
		default:
			flush()
		}
	}
	flush()
	return out, sc.Err()
}

// Commands returns the simple commands of the shell blocks (fenced sh, bash, shell or console, and indented
// ones), with their words expanded using env (nil: no variables). A command substitution's commands are
// returned as commands of their own (eval "$(bin/higgsd shellenv)" gives eval and bin/higgsd shellenv); the
// substitution itself expands to nothing, as nothing is run.
func Commands(path string, env map[string]string) ([]Command, []Block, error) {
	blocks, err := Blocks(path)
	if err != nil {
		return nil, nil, err
	}
	pairs := make([]string, 0, len(env))
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	cfg := &expand.Config{Env: expand.ListEnviron(pairs...), CmdSubst: func(io.Writer, *syntax.CmdSubst) error { return nil }}
	var out []Command
	for bi, b := range blocks {
		switch b.Lang {
		case "sh", "bash", "shell", "console", "indented":
		default:
			continue
		}
		file, err := syntax.NewParser().Parse(strings.NewReader(b.Text), path)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: block at line %d: %w", path, b.Line, err)
		}
		var werr error
		syntax.Walk(file, func(node syntax.Node) bool {
			call, ok := node.(*syntax.CallExpr)
			if !ok || len(call.Args) == 0 || werr != nil {
				return true
			}
			args, err := expand.Fields(cfg, call.Args...)
			if err != nil {
				werr = fmt.Errorf("%s:%d: %w", path, b.Line+int(call.Pos().Line())-1, err)
				return false
			}
			out = append(out, Command{Line: b.Line + int(call.Pos().Line()) - 1, Args: args, Block: bi})
			return true
		})
		if werr != nil {
			return nil, nil, werr
		}
	}
	return out, blocks, nil
}

// TableCommands returns the commands a Markdown file shows in table cells, as code spans (`…`) whose first word
// is name: records of what a measurement ran, too long to run in a test but checkable. A `\|` in a cell is a
// `|`. Code blocks are skipped; words are expanded as in Commands.
func TableCommands(path, name string, env map[string]string) ([]Command, error) {
	blocks, err := Blocks(path)
	if err != nil {
		return nil, err
	}
	inBlock := map[int]bool{}
	for _, b := range blocks {
		for i := range strings.Count(b.Text, "\n") {
			inBlock[b.Line+i] = true
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pairs := make([]string, 0, len(env))
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	cfg := &expand.Config{Env: expand.ListEnviron(pairs...)}
	var out []Command
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		if inBlock[n] || !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		spans := strings.Split(strings.ReplaceAll(line, `\|`, "|"), "`")
		for j := 1; j < len(spans); j += 2 {
			if !strings.HasPrefix(spans[j], name+" ") {
				continue
			}
			file, err := syntax.NewParser().Parse(strings.NewReader(spans[j]), path)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if len(file.Stmts) != 1 {
				return nil, fmt.Errorf("%s:%d: %q is not one command", path, n, spans[j])
			}
			call, ok := file.Stmts[0].Cmd.(*syntax.CallExpr)
			if !ok {
				return nil, fmt.Errorf("%s:%d: %q is not a simple command", path, n, spans[j])
			}
			args, err := expand.Fields(cfg, call.Args...)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			out = append(out, Command{Line: n, Args: args, Block: -1})
		}
	}
	return out, nil
}

// Files are the Markdown files whose commands the README tests run: README.md and every docs/*.md, under the
// repository root.
func Files(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...), nil
}
