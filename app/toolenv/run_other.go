//go:build !unix

package toolenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// Run runs c as a child with this process's stdin, stdout and stderr (no execve here), then exits with its
// status; it returns only when c cannot be started.
func Run(c Command) error {
	cmd := exec.Command(c.Path, c.Argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Env, os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", c.Path, err)
	}
	os.Exit(0)
	return nil
}
