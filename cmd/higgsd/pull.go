package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/higgs-go/higgs/adapters/hub"
	"github.com/higgs-go/higgs/app"
)

// runPull is `higgsd pull ID…`: it downloads models into the hub cache (the only way higgsd downloads,
// besides --pull) and prints their snapshot directories. Exit status: 0 done, 1 a pull failed, 2 bad
// arguments.
func runPull(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := app.ParsePull(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "higgsd pull: %v\n", err)
		return 2
	}
	c, err := hub.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "higgsd pull: %v\n", err)
		return 2
	}
	var progress func(hub.Event)
	if !cfg.Quiet {
		f, ok := stderr.(*os.File)
		progress = app.PullProgress(stderr, ok && term.IsTerminal(int(f.Fd())))
	}
	if err := app.RunPull(ctx, cfg, c, stdout, progress); err != nil {
		fmt.Fprintf(stderr, "higgsd pull: %v\n", err)
		return 1
	}
	return 0
}
