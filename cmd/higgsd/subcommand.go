package main

import (
	"context"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/higgs-go/higgs/app/doctor"
	"github.com/higgs-go/higgs/app/toolenv"
)

// subcommand runs the subcommand args starts with (pull, doctor, shellenv, exec); ok is false when args starts with
// none, and higgsd serves. Each subcommand parses its own flags (doctor takes serve's).
func subcommand(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	ctx := context.Background()
	switch args[0] {
	case "pull":
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runPull(ctx, args[1:], os.Stdout, os.Stderr), true
	case "doctor":
		return doctor.Main(args[1:], doctor.Env{Getenv: os.Getenv}, os.Stdout, os.Stderr), true
	case "shellenv":
		return toolenv.Shellenv(ctx, args[1:], os.Getenv, http.DefaultClient, os.Stdout, os.Stderr), true
	case "exec":
		return toolenv.Exec(ctx, args[1:], os.Getenv, os.Environ(), http.DefaultClient, os.Stderr), true
	}
	return 0, false
}
