// Command higgsd serves local LLMs over an OpenAI-compatible HTTP API with DFlash speculative decoding.
// With no flags it serves the bundled gocoder model and its drafter on 127.0.0.1:8000. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/models"
)

func main() { os.Exit(run()) }

func run() int {
	cfg, err := app.LoadConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "higgsd: invalid configuration:\n%v\n", err)
		return 2
	}
	log := app.NewLogger(cfg, os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, restore the default handling so a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	if models.IsDistributedWorker(cfg.Distributed, os.Getenv) {
		if err := models.RunWorker(ctx, cfg.ModelConfig(), log); err != nil {
			log.Error().Err(err).Msg("higgsd distributed worker stopped with an error")
			return 1
		}
		return 0
	}
	srv, err := initServer(cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("higgsd cannot start")
		return 1
	}
	if err := srv.Run(ctx); err != nil {
		log.Error().Err(err).Msg("higgsd stopped with an error")
		return exitCode(err)
	}
	return 0
}

// exitCode maps Run's error to the exit status: 2 for bad input (the configured models cannot be loaded), as
// for an invalid flag; 1 for anything else (the port is taken, a model fails to close).
func exitCode(err error) int {
	if errors.Is(err, app.ErrLoadModels) {
		return 2
	}
	return 1
}
