package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app"
)

// TestWiringReportsLoadFailure builds the real injector and runs it with a model that does not exist: the
// server must start listening, fail to load with a clear error, and shut down by itself.
func TestWiringReportsLoadFailure(t *testing.T) {
	cfg, err := app.LoadConfig([]string{"--port", "0", "--model", "/nonexistent/model", "--no-draft"},
		func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	srv, err := initServer(cfg, zerolog.Nop())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = srv.Run(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, app.ErrLoadModels)
	assert.Equal(t, 2, exitCode(err), "a model that cannot be loaded is bad input")
	assert.Equal(t, 1, exitCode(errors.New("listen on 127.0.0.1:8000: address already in use")))
	assert.Equal(t, 3, exitCode(fmt.Errorf("%w: 2 of 3", app.ErrCut)), "shutdown cut requests")
	assert.ErrorContains(t, err, "/nonexistent/model")
	assert.NoError(t, ctx.Err(), "Run must return on a load failure, not wait for a signal")
}

// A second signal exits with the status a shell gives a process that signal killed.
func TestSignalStatus(t *testing.T) {
	assert.Equal(t, 143, signalStatus(syscall.SIGTERM))
	assert.Equal(t, 130, signalStatus(syscall.SIGINT))
}

// The first SIGTERM ends onSignals' context (Run drains); a second one exits at once with status 143 after a
// log line counting the requests it cuts. The test re-runs its own binary as the process that is signalled.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM to send on Windows")
	}
	if os.Getenv("HIGGSD_SIGNAL_CHILD") == "1" {
		ctx, stop := onSignals(zerolog.New(os.Stderr), func() int { return 2 })
		defer stop()
		self, err := os.FindProcess(os.Getpid())
		require.NoError(t, err)
		require.NoError(t, self.Signal(syscall.SIGTERM))
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "draining")
		require.NoError(t, self.Signal(syscall.SIGTERM))
		time.Sleep(10 * time.Second)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondSignalExitsAtOnce$")
	cmd.Env = append(os.Environ(), "HIGGSD_SIGNAL_CHILD=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, stderr.String())
	assert.Equal(t, 143, exit.ExitCode(), stderr.String())
	out := stderr.String()
	assert.Contains(t, out, "draining", "the first signal only starts the drain")
	assert.Regexp(t, `"level":"warn","signal":"terminated","cut":2,"message":"second signal: exiting at once`, out)
}
