package speculative

import (
	"fmt"
	"math"
	"strconv"
)

// Decision is one depth decision with the measurements behind it. The policy records numbers only; Reason
// formats them when someone asks, so that a round's decision costs no allocation.
type Decision struct {
	// Code is RoundStats.Policy: "fixed", "length", "explore", "best", "probe" or "fallback-ar".
	Code string
	// BlockSize is the block size chosen (1: a plain step).
	BlockSize int
	// MaxBlockSize is the largest block the generation could verify.
	MaxBlockSize int
	// Adaptive says the adaptive policy decided (else the configuration did).
	Adaptive bool
	// Candidate is the block size the estimates below describe: the chosen one while speculating, the best
	// speculative one while decoding plainly (0 when nothing was measured yet).
	Candidate int
	// ExpectedTau is the expected number of tokens a round of Candidate commits (1 + Σ Π acceptance).
	ExpectedTau float64
	// CostSteps is a round of Candidate's expected time (draft + verify + rollback) in plain decoding steps.
	CostSteps float64
	// Left is the number of tokens the budget still allowed (Code "length").
	Left int
	// Tree, when > 0, is the node budget of the verification tree the round verifies instead of a chain
	// (TreeConfig); the drafter then drafts BlockSize slots and the tree holds at most Tree nodes of them.
	Tree int
	// ProbeEvery and ProbeBudget are the probe schedule (Code "probe").
	ProbeEvery  int
	ProbeBudget float64
}

// Mode is "speculative" when the decision drafts a block, "plain" when it decodes without drafting.
func (d Decision) Mode() string {
	if d.BlockSize > 1 {
		return "speculative"
	}
	return "plain"
}

// Reason says in words why the block size was chosen.
func (d Decision) Reason() string {
	what := fmt.Sprintf("block %d", d.BlockSize)
	if d.Tree > 0 {
		what = fmt.Sprintf("a tree of up to %d nodes over a block of %d", d.Tree, d.BlockSize)
	}
	estimate := func() string {
		arm := fmt.Sprintf("a block of %d", d.Candidate)
		if d.Tree > 0 {
			arm = what
		}
		return fmt.Sprintf("%s expects τ %s tokens per round and costs %s plain decoding steps (%s× plain decoding's rate)",
			arm, num(d.ExpectedTau), num(d.CostSteps), num(d.ExpectedTau/d.CostSteps))
	}
	switch d.Code {
	case "":
		return "no decoding step ran: the first token, sampled after the prefill, ended the request"
	case reasonFixed:
		if d.Tree > 0 {
			return fmt.Sprintf("fixed: %s, the adaptive policy is off", what)
		}
		if d.BlockSize > 1 {
			return fmt.Sprintf("fixed block size %d: the adaptive policy is off", d.BlockSize)
		}
		return "speculation is off for this request (block size 1, or no drafter loaded)"
	case reasonLength:
		return fmt.Sprintf("block shortened to %d: only %d tokens were left of the request's budget", d.BlockSize, d.Left)
	case reasonExplore:
		if d.BlockSize == 1 {
			return "exploring: measuring what a plain decoding step costs before any speculative block"
		}
		if d.Tree > 0 {
			return fmt.Sprintf("exploring: measuring %s (plain decoding and chains measured)", what)
		}
		return fmt.Sprintf("exploring: measuring a first speculative block of %d (plain decoding measured)", d.BlockSize)
	case reasonProbe:
		if d.BlockSize == 1 {
			what = "plain decoding"
		}
		return fmt.Sprintf("probe: re-measuring %s (at most one probe per %d rounds, probes losing at most %s%% of decode time)",
			what, d.ProbeEvery, num(100*d.ProbeBudget))
	case reasonBest:
		if d.CostSteps > 0 {
			return "speculating: " + estimate() + ", the highest expected rate measured"
		}
		return fmt.Sprintf("speculating with %s, the highest expected rate measured", what)
	case reasonFallbackAR:
		if d.Candidate > 1 && d.CostSteps > 0 {
			return "plain decoding: the best speculative choice, " + estimate() + ", is below break-even"
		}
		return "plain decoding: no speculative block is expected to pay"
	}
	return d.Code
}

// num formats x with up to two decimals, without trailing zeros.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
}
