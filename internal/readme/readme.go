// Package readme reads the shell commands a Markdown file shows, so that tests can run every command the
// README gives and keep it true. It is a test helper: only _test files import it.
package readme

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// Block is one code block: fenced (Lang is its info string) or indented by four spaces (Lang "indented").
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
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case fenced && strings.HasPrefix(line, "```"):
			flush()
			fenced = false
		case fenced:
			text.WriteString(line + "\n")
		case strings.HasPrefix(line, "```"):
			flush()
			fenced = true
			cur = &Block{Lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), Line: n + 1}
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
// ones), with their words expanded using env (nil: no variables).
func Commands(path string, env map[string]string) ([]Command, []Block, error) {
	blocks, err := Blocks(path)
	if err != nil {
		return nil, nil, err
	}
	pairs := make([]string, 0, len(env))
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	cfg := &expand.Config{Env: expand.ListEnviron(pairs...)}
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
