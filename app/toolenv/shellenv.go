package toolenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Shells shellenv writes for.
const (
	ShellSh   = "sh"
	ShellFish = "fish"
)

// Script writes vars as shell statements: `export NAME='value'` for sh, bash and zsh; `set -gx NAME 'value'`
// for fish. Values are single-quoted, so nothing in them is expanded.
func Script(vars []Var, shell string) (string, error) {
	var b strings.Builder
	for _, v := range vars {
		switch shell {
		case ShellSh, "bash", "zsh":
			fmt.Fprintf(&b, "export %s=%s\n", v.Name, quoteSh(v.Value))
		case ShellFish:
			fmt.Fprintf(&b, "set -gx %s %s\n", v.Name, quoteFish(v.Value))
		default:
			return "", fmt.Errorf("--shell %q: want sh, bash, zsh or fish", shell)
		}
	}
	return b.String(), nil
}

// quoteSh single-quotes s for a POSIX shell: a ' inside closes the quote, adds \' and reopens it.
func quoteSh(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// quoteFish single-quotes s for fish, where only \ and ' are escaped inside single quotes.
func quoteFish(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// Shellenv is `higgsd shellenv [--addr URL] [--api-key KEY] [--shell sh|bash|zsh|fish]`: it checks the server
// answers, then prints the variables as statements for eval. The exit status is 0, 1 when the server does not
// answer, 2 for bad flags.
func Shellenv(ctx context.Context, args []string, getenv func(string) string, hc *http.Client, stdout, stderr io.Writer) int {
	var o Options
	fs := flag.NewFlagSet("higgsd shellenv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.flags(fs, getenv)
	fs.StringVar(&o.Shell, "shell", ShellSh, "syntax to print: sh (for bash and zsh too) or fish")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: eval \"$(higgsd shellenv [flags])\"  (fish: higgsd shellenv --shell fish | source)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "higgsd shellenv: unexpected arguments %q\n", fs.Args())
		return 2
	}
	addr, err := ParseAddr(o.Addr)
	if err != nil {
		fmt.Fprintf(stderr, "higgsd shellenv: %v\n", err)
		return 2
	}
	script, err := Script(Vars(addr, o.Key), o.Shell)
	if err != nil {
		fmt.Fprintf(stderr, "higgsd shellenv: %v\n", err)
		return 2
	}
	note, err := Check(ctx, hc, addr, o.Key)
	if err != nil {
		fmt.Fprintf(stderr, "higgsd shellenv: %v\n", err)
		return 1
	}
	if note != "" {
		fmt.Fprintf(stderr, "higgsd shellenv: %s\n", note)
	}
	if _, err := io.WriteString(stdout, script); err != nil {
		fmt.Fprintf(stderr, "higgsd shellenv: %v\n", err)
		return 1
	}
	return 0
}
