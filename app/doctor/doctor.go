// Package doctor is `higgsd doctor`: it checks a setup as higgsd serve would meet it — the configuration,
// the listen address, the backend, the model and drafter files and their compatibility, memory against the
// budget — without loading the weights, and prints one line per check with what to do about a problem.
package doctor

import (
	"fmt"
	"io"
	"strings"
)

// Status is a check's outcome.
type Status string

// Outcomes: OK passes, Warn serves but not as well as it could (or a feature is off), Fail would stop
// higgsd or refuse every request.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
)

// Check is one line of the report.
type Check struct {
	// Name is the part checked ("config", "listen", "backend", "model", "tokenizer", "drafter", "block size",
	// "memory", "budget", "prefix cache").
	Name   string
	Status Status
	// Detail says what was found; Fix what to do (Warn and Fail).
	Detail string
	Fix    string
}

// Failed reports whether any check failed (doctor's exit status 1).
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Write prints one line per check: the status, the part, the detail and, after "fix:", the fix. Multi-line
// details (errors joined) are folded onto the line.
func Write(w io.Writer, checks []Check) error {
	for _, c := range checks {
		line := fmt.Sprintf("%-4s  %-10s  %s", c.Status, c.Name, oneLine(c.Detail))
		if c.Fix != "" && c.Status != OK {
			line += " — fix: " + oneLine(c.Fix)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return fmt.Errorf("doctor: write: %w", err)
		}
	}
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// human writes a byte count with one decimal in the largest binary unit that keeps it ≥ 1 ("1.5 GiB").
func human(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if f < 1024 || u == "TiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1024
	}
	return fmt.Sprintf("%d B", n)
}

// Main is `higgsd doctor [serve's flags]`: it prints the checks to stdout and returns the exit status, 0 when
// no check failed (warnings included), 1 otherwise (0 for -h).
func Main(args []string, env Env, stdout, stderr io.Writer) int {
	checks, err := Run(args, env, stderr)
	if err != nil {
		return 0 // -h: flag printed the usage
	}
	if err := Write(stdout, checks); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if Failed(checks) {
		return 1
	}
	return 0
}
