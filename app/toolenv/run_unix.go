//go:build unix

package toolenv

import (
	"fmt"
	"syscall"
)

// Run replaces this process with c (execve): the command inherits the process id, the terminal, stdin,
// stdout and stderr, receives every signal sent to it, and its exit status is the one the caller sees. It
// returns only when the exec fails.
func Run(c Command) error {
	if err := syscall.Exec(c.Path, c.Argv, c.Env); err != nil {
		return fmt.Errorf("exec %s: %w", c.Path, err)
	}
	return nil
}
