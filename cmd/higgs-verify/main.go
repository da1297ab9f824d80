// Command higgs-verify checks the engine against references: backend vs backend, speculative vs
// autoregressive, rollback vs recompute. Its JSON output is a stable contract (see VERIFY-CLI.md).
package main

import (
	"fmt"
	"os"

	"github.com/higgs-go/higgs/app"
)

func main() {
	if _, err := initTarget(app.ModelConfig{Backend: "cpu"}); err != nil {
		fmt.Fprintln(os.Stderr, "higgs-verify:", err)
		os.Exit(2)
	}
}
