package ports

import "time"

// Certification summarises the lossless certificate (`higgs-verify certify`) found beside a served model:
// what GET /v1/models shows of it. The whole report stays in the file.
type Certification struct {
	// Pass is the certificate's verdict: every speculative run it made gave plain decoding's tokens, and its
	// distribution test (when it ran one) passed.
	Pass bool
	// When the certificate was made; Build the higgs build that made it (VCS revision, "-dirty" when the tree
	// was modified, "unknown" without VCS information).
	When  time.Time
	Build string
	// Backend and Kernels are what it ran on ("cpu", "cpu-fast", "mlx"; "exact" or "fast"); Drafter the
	// drafter it ran with.
	Backend, Kernels, Drafter string
	// Tolerance says what counted as a pass; Scope what was covered (verification shapes, block sizes).
	Tolerance, Scope string
	// Matches reports that it was made for the weights served now (the same fingerprint of config.json and
	// the safetensors headers) on the backend serving them now.
	Matches bool
	// Trees is the certificate's tree verification (nil in a certificate made before higgs verified trees).
	Trees *CertifiedTrees
	// Problem is set, and the rest left empty, when the file is present but cannot be read.
	Problem string
}

// CertifiedTrees is a certificate's account of tree verification.
type CertifiedTrees struct {
	// Verified: tree rounds ran (false on a backend without tree verification, whose tree requests verify
	// chains; Note says why). Pass: every tree run gave plain decoding's tokens.
	Verified, Pass bool
	// BlockSizes and Budgets are the block sizes and node budgets of the tree runs.
	BlockSizes, Budgets []int
	// TreeRounds of DraftRounds (the draft rounds of the tree runs) verified a tree.
	TreeRounds, DraftRounds int
	Note                    string
	// DistributionPass is the T > 0 distribution test's verdict with trees (nil: not run).
	DistributionPass *bool
}
