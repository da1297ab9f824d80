package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// hogEnv marks a process started by `bench --hog`: it spins one core instead of running a command.
const hogEnv = "HIGGS_VERIFY_HOG"

// runHogIfAsked turns this process into a hog when hogEnv is set: the main goroutine spins, and the process
// exits when its standard input (a pipe from the bench that started it) ends, so a hog never outlives that
// bench, even one that is killed. It returns only when hogEnv is not set.
func runHogIfAsked() {
	if os.Getenv(hogEnv) != "1" {
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for { // a load on the core like a shell's `while :; do :; done`
	}
}

// startHogs starts n hog processes (this executable under hogEnv), each spinning one core as another
// program sharing the machine would: separate processes, so the operating system's scheduler, not Go's,
// shares the cores between them and the bench. stop ends them (closing their input, then killing any that
// linger) and returns the CPU time they used; a failure to start is an error, with none left running.
func startHogs(n int) (stop func() (time.Duration, error), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("hog: this executable's path: %w", err)
	}
	type hog struct {
		cmd *exec.Cmd
		in  io.Closer
	}
	var hogs []hog
	stop = func() (time.Duration, error) {
		var errs []error
		var cpu time.Duration
		for _, h := range hogs {
			_ = h.in.Close()
		}
		for _, h := range hogs {
			done := make(chan error, 1)
			go func() { done <- h.cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				errs = append(errs, h.cmd.Process.Kill())
				<-done
			}
			if ps := h.cmd.ProcessState; ps != nil {
				cpu += ps.UserTime() + ps.SystemTime()
			}
		}
		return cpu, errors.Join(errs...)
	}
	for range n {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), hogEnv+"=1")
		in, err := cmd.StdinPipe()
		if err != nil {
			_, serr := stop()
			return nil, errors.Join(fmt.Errorf("hog: %w", err), serr)
		}
		if err := cmd.Start(); err != nil {
			_ = in.Close()
			_, serr := stop()
			return nil, errors.Join(fmt.Errorf("hog: start %s: %w", exe, err), serr)
		}
		hogs = append(hogs, hog{cmd, in})
	}
	return stop, nil
}
