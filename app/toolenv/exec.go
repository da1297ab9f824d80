package toolenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
)

// Command is what Exec runs: the program's path, its argv (argv[0] the name given) and its environment.
type Command struct {
	Path string
	Argv []string
	Env  []string
}

// PrepareExec parses `higgsd exec [--addr URL] [--api-key KEY] -- CMD ARGS…`, checks the server answers and
// returns the command to run with environ plus the variables (replacing any of the same name). note is
// shellenv's loading note. A usage problem wraps ErrUsage.
func PrepareExec(ctx context.Context, args []string, getenv func(string) string, environ []string, hc *http.Client, stderr io.Writer) (cmd Command, note string, err error) {
	var o Options
	fs := flag.NewFlagSet("higgsd exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.flags(fs, getenv)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: higgsd exec [flags] -- CMD [ARGS…]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Command{}, "", fmt.Errorf("%w: %w", ErrUsage, err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return Command{}, "", fmt.Errorf("%w: no command to run: higgsd exec [flags] -- CMD [ARGS…]", ErrUsage)
	}
	addr, err := ParseAddr(o.Addr)
	if err != nil {
		return Command{}, "", fmt.Errorf("%w: %w", ErrUsage, err)
	}
	path, err := exec.LookPath(rest[0])
	if err != nil {
		return Command{}, "", fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if note, err = Check(ctx, hc, addr, o.Key); err != nil {
		return Command{}, "", err
	}
	key := o.Key
	if key == "" {
		// The command talks to higgsd only: a provider key already in its environment (a real OpenAI or
		// Anthropic key) must not travel to this server, possibly over plain HTTP to another machine.
		key = NoKey
	}
	return Command{Path: path, Argv: rest, Env: WithVars(environ, Vars(addr, key))}, note, nil
}

// NoKey is the API key `higgsd exec` gives the command for a server without keys, in place of any key the
// environment holds (the tools want one set; higgsd without keys takes any).
const NoKey = "higgs-no-key"

// Errors PrepareExec wraps: ErrUsage for the caller's flags (exit status 2), ErrNotFound for a command that
// is not found (127, as a shell answers).
var (
	ErrUsage    = errors.New("usage")
	ErrNotFound = errors.New("command not found")
)

// Exec is `higgsd exec`: PrepareExec, then Run, which replaces this process with the command (its exit
// status and signals are then the command's own). It returns only on failure: 0 for -h, 2 for bad flags, 127
// for a command not found, 1 when the server does not answer, 126 when the command cannot be run.
func Exec(ctx context.Context, args []string, getenv func(string) string, environ []string, hc *http.Client, stderr io.Writer) int {
	c, note, err := PrepareExec(ctx, args, getenv, environ, hc, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "higgsd exec: %v\n", err)
		return 2
	case errors.Is(err, ErrNotFound):
		fmt.Fprintf(stderr, "higgsd exec: %v\n", err)
		return 127
	case err != nil:
		fmt.Fprintf(stderr, "higgsd exec: %v\n", err)
		return 1
	}
	if note != "" {
		fmt.Fprintf(stderr, "higgsd exec: %s\n", note)
	}
	err = Run(c)
	fmt.Fprintf(stderr, "higgsd exec: %v\n", err)
	return 126
}

// WithVars returns environ with vars set: an entry of the same name is replaced, the others kept in order.
func WithVars(environ []string, vars []Var) []string {
	set := make(map[string]bool, len(vars))
	for _, v := range vars {
		set[v.Name] = true
	}
	out := make([]string, 0, len(environ)+len(vars))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !set[name] {
			out = append(out, kv)
		}
	}
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}
