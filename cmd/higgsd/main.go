// Command higgsd serves local LLMs over an OpenAI-compatible HTTP API with DFlash speculative decoding.
// With no flags it serves the bundled gocoder model and its drafter on 127.0.0.1:8000; the subcommands pull,
// doctor, shellenv and exec fetch models, check a setup and point tools at a server (subcommand.go). See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/models"
)

func main() { os.Exit(run()) }

func run() int {
	if code, ok := subcommand(os.Args[1:]); ok {
		return code
	}
	cfg, err := app.LoadConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "higgsd: invalid configuration:\n%v\n", err)
		return 2
	}
	if cfg.Version {
		fmt.Println(app.Version("higgsd"))
		return 0
	}
	log := app.NewLogger(cfg, os.Stderr)
	if models.IsDistributedWorker(cfg.Distributed, os.Getenv) {
		ctx, stop := onSignals(log, nil)
		defer stop()
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
	ctx, stop := onSignals(log, srv.InFlight)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		log.Error().Err(err).Msg("higgsd stopped with an error")
		return exitCode(err)
	}
	return 0
}

// exitCode maps Run's error to the exit status: 2 for bad input (the configured models cannot be loaded), as
// for an invalid flag; 3 when shutdown's deadline cut requests still running (app.ErrCut); 1 for anything
// else (the port is taken, a model fails to close). docs/serving.md lists them all.
func exitCode(err error) int {
	switch {
	case errors.Is(err, app.ErrLoadModels):
		return 2
	case errors.Is(err, app.ErrCut):
		return 3
	}
	return 1
}

// onSignals returns a context that SIGINT or SIGTERM ends (Run then drains). A second signal ends the process
// at once, after a log line naming the requests it cuts (inFlight, when not nil, counts them), with the
// status a shell gives a process killed by that signal (signalStatus). stop stops listening.
func onSignals(log zerolog.Logger, inFlight func() int) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			log.Info().Str("signal", sig.String()).Msg("signal received: shutting down (a second signal exits at once)")
			cancel()
		case <-ctx.Done():
			return
		}
		sig := <-ch
		ev := log.Warn().Str("signal", sig.String())
		if inFlight != nil {
			ev = ev.Int("cut", inFlight())
		}
		ev.Msg("second signal: exiting at once; requests in flight are cut without their API's final event")
		os.Exit(signalStatus(sig))
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// signalStatus is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process
// a signal killed.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
