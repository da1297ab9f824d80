// Package hostile_test is issue 33's hostile-client suite: the real higgsd wiring (both APIs on one loopback
// listener, keys, the prefix cache, /v1/events, the drain) over the fake engine, sent bad bodies, slow and
// vanishing clients, bursts, special-token injection through every role and tool field, cross-tenant probes
// of the cache and the event stream, DNS-rebinding and cross-site probes, and a shutdown under load on both
// APIs. It prints one line of counts after its tests; `make test` runs it in local directory mode so that the
// line is shown.
package hostile_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
)

// tally is the suite's counts, printed by TestMain: requests sent (cases), answered with a status the case
// allows (right status), answered 5xx where no 5xx is documented (503 while draining and Anthropic's 529 when
// the queue is full are; 500 never is), crashes (no answer at all, or Run failing or hanging), and leaks (a
// server that left a target session open or goroutines behind).
var tally struct {
	cases, right, fivexx, crashes, leaks atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	fmt.Printf("hostile: %d cases, %d right status, %d 5xx, %d crashes, %d leaks\n", tally.cases.Load(),
		tally.right.Load(), tally.fivexx.Load(), tally.crashes.Load(), tally.leaks.Load())
	os.Exit(code)
}
