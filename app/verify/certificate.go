package verify

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// Certificate is the JSON object `higgs-verify certify --json` prints and writes beside the model. Its
// head (models.CertificateSummary) is what higgsd shows in /v1/models; verification shapes each have a
// section (Chain, Tree).
type Certificate struct {
	models.CertificateSummary
	ModelDir   string `json:"model_dir"`
	DrafterDir string `json:"drafter_dir"`
	// Quantization is the target's stored format, from its config.json.
	Quantization     string `json:"quantization"`
	DrafterBlockSize int    `json:"drafter_block_size"`
	Prompts          struct {
		Source string `json:"source"`
		Count  int    `json:"count"`
		Tokens []int  `json:"tokens"` // each prompt's length
	} `json:"prompts"`
	MaxTokens int `json:"max_tokens"`
	Batch     int `json:"batch"`
	// Chain is the chain verification's section, Tree the tree's.
	Chain CertSection `json:"chain"`
	Tree  CertSection `json:"tree"`
	// Disagreements lists every run whose tokens differed from plain greedy decoding's, at its first
	// differing token.
	Disagreements []Disagreement `json:"disagreements"`
	// Distribution is the T > 0 test (absent at --temperature 0); Verify its verification rule.
	Distribution *DistTest `json:"distribution,omitempty"`
	Verify       string    `json:"verify,omitempty"`
	// TreeDistribution is the T > 0 test with trees (under VerifyMatch, the rule trees keep exact); absent
	// at --temperature 0 or when trees were not verified.
	TreeDistribution *DistTest `json:"tree_distribution,omitempty"`
	// File is where the certificate was written ("" when not written); FileNote says why not beside the
	// model when it went elsewhere, or why it was not written.
	File     string `json:"file,omitempty"`
	FileNote string `json:"file_note,omitempty"`
}

// CertSection is one verification shape's part of the certificate.
type CertSection struct {
	// Verified: the shape was run; Note says why not when it was not.
	Verified bool   `json:"verified"`
	Note     string `json:"note,omitempty"`
	Pass     bool   `json:"pass"`
	// BlockSizes are the sizes run; NotRun those asked for but not run, with the reason.
	BlockSizes []int `json:"block_sizes"`
	// Budgets are the tree section's node budgets (anchor included) and Width its candidates per slot.
	Budgets []int      `json:"budgets,omitempty"`
	Width   int        `json:"width,omitempty"`
	NotRun  []NotRun   `json:"not_run,omitempty"`
	Cases   []CertCase `json:"cases"`
	Modes   []string   `json:"modes"`
	Totals  CertTotals `json:"totals"`
}

// NotRun is a block size (with a tree budget, in the tree section) certify did not run.
type NotRun struct {
	BlockSize int    `json:"block_size"`
	Budget    int    `json:"budget,omitempty"`
	Reason    string `json:"reason"`
}

// CertCase is one block size (and tree budget) in one mode: every prompt (alone) or every batch member.
type CertCase struct {
	BlockSize int `json:"block_size"`
	// Budget is a tree case's node budget (absent for a chain).
	Budget int    `json:"budget,omitempty"`
	Mode   string `json:"mode"`
	Runs   int    `json:"runs"`
	Tokens int    `json:"tokens"`
	// CachedTokens are the prompt tokens restored from the prefix cache over the runs (prefix-hit modes);
	// PrefixMisses the runs of those modes that restored nothing (a one-token prompt cannot hit; a backend
	// without prefix export never does).
	CachedTokens int     `json:"cached_tokens"`
	PrefixMisses int     `json:"prefix_misses,omitempty"`
	Tau          float64 `json:"tau"`
	// DraftRounds are the runs' draft–verify rounds; TreeRounds those that verified a tree (0 for a chain, and
	// for a tree asked of a session without the ability, which verifies chains); LargestTree the most nodes
	// one of them verified.
	DraftRounds   int  `json:"draft_rounds"`
	TreeRounds    int  `json:"tree_rounds"`
	LargestTree   int  `json:"largest_tree,omitempty"`
	Disagreements int  `json:"disagreements"`
	Pass          bool `json:"pass"`
}

// CertTotals add up a section's cases.
type CertTotals struct {
	Runs          int `json:"runs"`
	Tokens        int `json:"tokens"`
	DraftRounds   int `json:"draft_rounds"`
	TreeRounds    int `json:"tree_rounds"`
	Disagreements int `json:"disagreements"`
}

// add counts cs in s's cases and totals.
func (s *CertSection) add(cs CertCase) {
	s.Cases = append(s.Cases, cs)
	s.Totals.Runs += cs.Runs
	s.Totals.Tokens += cs.Tokens
	s.Totals.DraftRounds += cs.DraftRounds
	s.Totals.TreeRounds += cs.TreeRounds
	s.Totals.Disagreements += cs.Disagreements
	s.Pass = s.Pass && cs.Pass
}

// Disagreement is one speculative run's first token that differs from plain greedy decoding's, with the
// target's top-2 margin there (read from a plain session's logits over the prompt and the plain tokens
// before it): a tiny margin is a near-tie that numerics may flip, a large one a bug.
type Disagreement struct {
	// Shape is the section ("chain" or "tree"); Budget a tree run's node budget.
	Shape     string `json:"shape"`
	BlockSize int    `json:"block_size"`
	Budget    int    `json:"budget,omitempty"`
	Mode      string `json:"mode"`
	Prompt    int    `json:"prompt"`
	// Member is the run's index in its batch (-1 alone).
	Member   int         `json:"member"`
	Position int         `json:"position"` // index into the generated tokens
	Plain    ports.Token `json:"plain_token"`
	Spec     ports.Token `json:"spec_token"` // -1 when the speculative output ended first
	Margin   *Margin     `json:"margin,omitempty"`
	// MarginError says why the margin could not be read.
	MarginError string `json:"margin_error,omitempty"`
}

// Margin is the target's top-2 gap at a position: its two best next tokens, their logits, the logit gap and
// the probability gap (softmax at temperature 1).
type Margin struct {
	Top1      ports.Token `json:"top1"`
	Top2      ports.Token `json:"top2"`
	Top1Logit float64     `json:"top1_logit"`
	Top2Logit float64     `json:"top2_logit"`
	LogitGap  float64     `json:"logit_gap"`
	ProbGap   float64     `json:"prob_gap"`
}

// The tree section's notes when it verified no tree.
const (
	treeNoteBackend = "not verified: this backend does not verify trees (its sessions lack tree verification, so a tree request verifies chains); this certificate covers chains only"
	treeNoteOff     = "not verified: trees left out (--no-trees)"
	treeNoteSizes   = "not verified: no block size ≥ 3 was run (trees run at the chain section's block sizes from 3)"
	treeNoteRounds  = "not verified: no round of the tree runs drafted (every generation ended first)"
	treeNoteBatch   = "batched members verify chains: no round of the batch modes verified a tree (tree_rounds 0), so they certify chains asked for as trees"
)

// Build, when set at link time (-ldflags "-X github.com/higgs-go/higgs/app/verify.Build=…"), names this build
// in certificates instead of the VCS revision.
var Build string

// BuildRevision is this binary's VCS revision ("-dirty" when built from a modified tree), else its module
// version, else "unknown" (go test, -buildvcs=false builds outside a release).
func BuildRevision() string {
	if Build != "" {
		return Build
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// scope is the certificate's one-line coverage.
func scope(c Certificate) string {
	s := "chain"
	if n := len(c.Chain.BlockSizes); n > 0 {
		s += fmt.Sprintf(", block sizes %s", SizeRange(c.Chain.BlockSizes))
	}
	s += ", " + strings.Join(c.Chain.Modes, ", ")
	if c.Distribution != nil {
		s += fmt.Sprintf(", T=%g distribution", c.Distribution.Temperature)
	}
	t := c.Tree
	if !t.Verified {
		why := "not run"
		switch t.Note {
		case treeNoteBackend:
			why = "this backend does not verify trees"
		case treeNoteOff:
			why = "--no-trees"
		case treeNoteSizes:
			why = "no block size ≥ 3"
		case treeNoteRounds:
			why = "no round drafted"
		}
		return s + "; trees not verified (" + why + ")"
	}
	s += fmt.Sprintf("; tree, block sizes %s, budgets %s", SizeRange(t.BlockSizes), SizeRange(t.Budgets))
	var trees, chains []string
	for _, m := range t.Modes {
		if treeModes(t.Cases, m) {
			trees = append(trees, m)
		} else {
			chains = append(chains, m)
		}
	}
	if len(trees) > 0 {
		s += ", " + strings.Join(trees, ", ")
	}
	if len(chains) > 0 {
		s += " (" + strings.Join(chains, ", ") + ": chains)"
	}
	if c.TreeDistribution != nil {
		s += fmt.Sprintf(", T=%g distribution (match)", c.TreeDistribution.Temperature)
	}
	return s
}

// treeModes reports whether mode's cases verified trees.
func treeModes(cases []CertCase, mode string) bool {
	for _, cs := range cases {
		if cs.Mode == mode && cs.TreeRounds > 0 {
			return true
		}
	}
	return false
}

// SizeRange writes sizes as "1-8" when contiguous, else "1,2,4".
func SizeRange(sizes []int) string {
	contiguous := true
	for i := 1; i < len(sizes); i++ {
		contiguous = contiguous && sizes[i] == sizes[i-1]+1
	}
	if contiguous && len(sizes) > 1 {
		return fmt.Sprintf("%d-%d", sizes[0], sizes[len(sizes)-1])
	}
	parts := make([]string, len(sizes))
	for i, b := range sizes {
		parts[i] = fmt.Sprint(b)
	}
	return strings.Join(parts, ",")
}

// dirName names a model directory in the report: "org/name@revision" for a hub-cache snapshot
// (…/models--org--name/snapshots/REV), else its base name.
func dirName(dir string) string {
	if dir == "" {
		return ""
	}
	rev, snaps := filepath.Base(dir), filepath.Dir(dir)
	if repo := filepath.Base(filepath.Dir(snaps)); filepath.Base(snaps) == "snapshots" && strings.HasPrefix(repo, "models--") {
		return strings.ReplaceAll(strings.TrimPrefix(repo, "models--"), "--", "/") + "@" + rev
	}
	return filepath.Base(dir)
}

// kernelMode is the CPU kernel mode a backend name implies ("" for a backend without modes).
func kernelMode(backend string) string {
	switch backend {
	case models.BackendCPUFast:
		return models.KernelsFast
	case models.BackendCPU:
		return models.KernelsExact
	}
	return ""
}

// quantization describes dir's stored format from config.json: "4-bit affine, group 64" or the dtype.
func quantization(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct {
		Quantization *struct {
			Bits      int `json:"bits"`
			GroupSize int `json:"group_size"`
		} `json:"quantization"`
		DType string `json:"torch_dtype"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return ""
	}
	if q := cfg.Quantization; q != nil && q.Bits > 0 {
		return fmt.Sprintf("%d-bit affine, group %d", q.Bits, q.GroupSize)
	}
	return cfg.DType
}

// WriteCertificate writes c as indented JSON to out, or, with out "", beside the model
// (<model dir>/higgs-certificate.json). When the model directory cannot be written (read-only, a shared
// store) it writes to the working directory instead and says so in c.FileNote; c.File is where it went. An
// explicit out that cannot be written is an error.
func WriteCertificate(c *Certificate, out string) error {
	write := func(path string) error {
		c.File = path
		data, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			c.File = ""
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
			c.File = ""
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			c.File = ""
			return err
		}
		return nil
	}
	if out != "" {
		if err := write(out); err != nil {
			return fmt.Errorf("%w: write the certificate to %s: %w", ErrBadInput, out, err)
		}
		return nil
	}
	if c.ModelDir == "" {
		return fmt.Errorf("%w: the model has no directory to write the certificate beside: give --out", ErrBadInput)
	}
	beside := filepath.Join(c.ModelDir, models.CertificateFile)
	err := write(beside)
	if err == nil {
		return nil
	}
	fallback, ferr := filepath.Abs(fmt.Sprintf("higgs-certificate-%s.json", safeName(c.Model)))
	if ferr == nil {
		c.FileNote = fmt.Sprintf("not written beside the model (%v): written to %s instead; copy it to %s for /v1/models to show it",
			err, fallback, beside)
		if ferr = write(fallback); ferr == nil {
			return nil
		}
	}
	c.FileNote = fmt.Sprintf("not written: beside the model: %v; working directory: %v", err, ferr)
	return fmt.Errorf("%w: write the certificate: %s", ErrBadInput, c.FileNote)
}

// safeName keeps letters, digits, '.', '-' and '_' of s (others become '_').
func safeName(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '-' || ch == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "model"
	}
	return string(b)
}
