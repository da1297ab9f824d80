// Command higgs-verify checks the engine against references: backend vs backend, speculative vs
// autoregressive, rollback vs recompute. Its JSON output is a stable contract (docs/higgs-verify.md).
//
// Exit status: 0 ok, 1 a check failed, 2 bad usage or input (with a one-line reason on stderr).
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	runHogIfAsked() // a `bench --hog` child spins here until its bench ends
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, initModels)
	stop()
	os.Exit(code)
}
