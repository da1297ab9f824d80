package models

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// CertificateFile is the name of `higgs-verify certify`'s report beside a model's config.json.
const CertificateFile = "higgs-certificate.json"

// CertificateFormat is the version of the certificate's JSON; a reader refuses a newer one.
const CertificateFormat = 1

// CertificateSummary is the head of a certificate: the fields every version keeps, which higgsd reads to show
// the certificate in /v1/models. The report (app/verify.Certificate) embeds it, so these fields sit at the
// top of the file.
type CertificateSummary struct {
	Format int `json:"format"`
	// Certified is the verdict: every speculative run gave plain decoding's tokens and the distribution test
	// (when run) passed.
	Certified bool      `json:"certified"`
	When      time.Time `json:"when"`
	Build     string    `json:"build"`
	Model     string    `json:"model"`
	Drafter   string    `json:"drafter"`
	Backend   string    `json:"backend"`
	Kernels   string    `json:"kernels"`
	// Fingerprint identifies the weights certified (Fingerprint of the model directory).
	Fingerprint string `json:"fingerprint"`
	Tolerance   string `json:"tolerance"`
	Scope       string `json:"scope"`
	// Trees summarises the certificate's tree section for /v1/models (absent from certificates made before
	// higgs verified trees).
	Trees *TreeSummary `json:"trees,omitempty"`
}

// TreeSummary is the head's account of tree verification: whether trees were verified at all (a backend
// without the abilities verifies chains when asked for trees, and Note says so), whether every tree run
// gave plain decoding's tokens, at which block sizes and node budgets, and how many rounds really verified
// a tree out of the draft rounds of the tree runs.
type TreeSummary struct {
	Verified    bool   `json:"verified"`
	Pass        bool   `json:"pass"`
	BlockSizes  []int  `json:"block_sizes"`
	Budgets     []int  `json:"budgets"`
	TreeRounds  int    `json:"tree_rounds"`
	DraftRounds int    `json:"draft_rounds"`
	Note        string `json:"note,omitempty"`
	// DistributionPass is the tree distribution test's verdict (absent when it did not run).
	DistributionPass *bool `json:"distribution_pass,omitempty"`
}

// ReadCertificate reads the summary of dir's certificate; (nil, nil) when there is none.
func ReadCertificate(dir string) (*CertificateSummary, error) {
	data, err := os.ReadFile(filepath.Join(dir, CertificateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s CertificateSummary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", CertificateFile, err)
	}
	if s.Format < 1 || s.Format > CertificateFormat {
		return nil, fmt.Errorf("%s: format %d, this build reads 1..%d", CertificateFile, s.Format, CertificateFormat)
	}
	return &s, nil
}

// Certification is dir's certificate as the model card shows it (nil when there is none): Matches compares
// its fingerprint with dir's weights and its backend with backend, the one serving them. A certificate that
// cannot be read is reported in Problem, never dropped silently.
func Certification(dir, backend string) *ports.Certification {
	if dir == "" {
		return nil
	}
	s, err := ReadCertificate(dir)
	if err != nil {
		return &ports.Certification{Problem: err.Error()}
	}
	if s == nil {
		return nil
	}
	c := &ports.Certification{Pass: s.Certified, When: s.When, Build: s.Build, Backend: s.Backend, Kernels: s.Kernels,
		Drafter: s.Drafter, Tolerance: s.Tolerance, Scope: s.Scope}
	if t := s.Trees; t != nil {
		c.Trees = &ports.CertifiedTrees{Verified: t.Verified, Pass: t.Pass, BlockSizes: slices.Clone(t.BlockSizes),
			Budgets: slices.Clone(t.Budgets), TreeRounds: t.TreeRounds, DraftRounds: t.DraftRounds, Note: t.Note,
			DistributionPass: t.DistributionPass}
	}
	fp, err := Fingerprint(dir)
	c.Matches = err == nil && fp == s.Fingerprint && s.Backend == backend
	return c
}

// maxHeader bounds the safetensors header a fingerprint reads (real headers are a few MB at most).
const maxHeader = 256 << 20

// Fingerprint identifies the weights of model directory dir without reading them: SHA-256 over config.json
// and, for every *.safetensors file in name order, its name, size and header (dtypes, shapes, offsets). A
// requantization, a changed config or a different checkpoint changes it; the bytes of the weights themselves
// are not read (that would take as long as loading them).
func Fingerprint(dir string) (string, error) {
	h := sha256.New()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "config.json %d\n", len(cfg))
	h.Write(cfg)
	names, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	for _, n := range names {
		if err := hashHeader(h, n); err != nil {
			return "", fmt.Errorf("fingerprint %s: %w", filepath.Base(n), err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func hashHeader(h io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s %d\n", filepath.Base(name), st.Size())
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return err
	}
	if n > maxHeader || int64(n) > st.Size()-8 {
		return fmt.Errorf("header of %d bytes in a file of %d", n, st.Size())
	}
	_, err = io.CopyN(h, f, int64(n))
	return err
}
