package hfmodel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ErrModelNotFound is wrapped by Resolve when arg is neither a directory nor a model in the hub cache.
var ErrModelNotFound = errors.New("model not found")

// repoID matches a Hugging Face model id ORG/NAME with an optional @REVISION (a branch, tag or commit).
var repoID = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?:@([A-Za-z0-9._/-]+))?$`)

// Resolve turns a model argument into a local directory, never downloading anything.
//
// An existing directory is returned as is (even when it also looks like ORG/NAME). Otherwise arg must be a
// Hugging Face id ORG/NAME[@REV] present in a hub cache, searched in order: $HF_HUB_CACHE, $HF_HOME/hub,
// ~/.cache/huggingface/hub; the directory is models--ORG--NAME/snapshots/<commit>, where <commit> comes from
// refs/REV (REV defaults to main) when that file exists, else REV itself when it names a snapshot, else — for
// the default revision only — the only snapshot, or the most recently modified one. When nothing matches the
// error wraps ErrModelNotFound and lists every place looked at.
func Resolve(arg string) (string, error) {
	if arg == "" {
		return "", fmt.Errorf("%w: empty model name", ErrModelNotFound)
	}
	if st, err := os.Stat(arg); err == nil {
		if !st.IsDir() {
			return "", fmt.Errorf("%w: %s is a file, want a model directory or a hub id ORG/NAME", ErrModelNotFound, arg)
		}
		return arg, nil
	}
	id, err := ParseHubID(arg)
	if err != nil {
		return "", fmt.Errorf("%w: %s is not a directory, nor a hub id of the form ORG/NAME[@REVISION]", ErrModelNotFound, arg)
	}
	dir, looked := id.Cached()
	if dir != "" {
		return dir, nil
	}
	return "", fmt.Errorf("%w: %s is not a local directory and is not in the hub cache (looked at %s); higgs never downloads unless asked — fetch it first with `higgsd pull %s`",
		ErrModelNotFound, arg, strings.Join(looked, ", "), id)
}

// HubID is a Hugging Face model id ORG/NAME with an optional revision (a branch, tag or commit).
type HubID struct {
	Org, Name string
	// Revision is "" when none was given (the hub's default branch, main).
	Revision string
}

// ParseHubID parses ORG/NAME[@REVISION]; the parts may not climb out of a directory ("..").
func ParseHubID(s string) (HubID, error) {
	m := repoID.FindStringSubmatch(s)
	if m == nil || strings.Contains(s, "..") {
		return HubID{}, fmt.Errorf("%q is not a hub id of the form ORG/NAME[@REVISION]", s)
	}
	return HubID{Org: m[1], Name: m[2], Revision: m[3]}, nil
}

// Repo is ORG/NAME, the id without its revision.
func (id HubID) Repo() string { return id.Org + "/" + id.Name }

// Rev is the revision to look up: the one given, else main.
func (id HubID) Rev() string {
	if id.Revision == "" {
		return "main"
	}
	return id.Revision
}

// String is ORG/NAME or ORG/NAME@REVISION, as parsed.
func (id HubID) String() string {
	if id.Revision == "" {
		return id.Repo()
	}
	return id.Repo() + "@" + id.Revision
}

// RepoDir is the repository's directory in the hub cache root cache: models--ORG--NAME.
func (id HubID) RepoDir(cache string) string {
	return filepath.Join(cache, "models--"+id.Org+"--"+id.Name)
}

// Cached finds the snapshot directory of id in the hub caches (HubCaches' order), as Resolve describes; it
// returns "" when none holds it, and every path it tried.
func (id HubID) Cached() (dir string, looked []string) {
	for _, cache := range HubCaches() {
		d, tried := id.CachedIn(cache)
		looked = append(looked, tried...)
		if d != "" {
			return d, looked
		}
	}
	return "", looked
}

// CachedIn is Cached for one cache root.
func (id HubID) CachedIn(cache string) (dir string, looked []string) {
	return snapshot(id.RepoDir(cache), id.Rev(), id.Revision != "")
}

// HubCache is where downloads go: the first of HubCaches ($HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub), as the Hugging Face tools choose it.
func HubCache() (string, error) {
	caches := HubCaches()
	if len(caches) == 0 {
		return "", errors.New("no hub cache: set HF_HUB_CACHE or HF_HOME (no home directory to default to)")
	}
	return caches[0], nil
}

// HubCaches lists the cache roots in lookup order, without duplicates.
func HubCaches() []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		p = filepath.Clean(p)
		for _, q := range out {
			if q == p {
				return
			}
		}
		out = append(out, p)
	}
	add(os.Getenv("HF_HUB_CACHE"))
	if h := os.Getenv("HF_HOME"); h != "" {
		add(filepath.Join(h, "hub"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, ".cache", "huggingface", "hub"))
	}
	return out
}

// snapshot finds the snapshot directory for rev in one cached repo and returns the paths it tried.
func snapshot(repo, rev string, explicit bool) (string, []string) {
	snaps := filepath.Join(repo, "snapshots")
	ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
	tried := []string{ref}
	if b, err := os.ReadFile(ref); err == nil {
		commit := strings.TrimSpace(string(b))
		dir := filepath.Join(snaps, commit)
		tried = append(tried, dir)
		if commit != "" && !strings.ContainsAny(commit, `/\`) && isDir(dir) {
			return dir, tried
		}
	}
	if explicit {
		dir := filepath.Join(snaps, rev)
		tried = append(tried, dir)
		if !strings.Contains(rev, "/") && isDir(dir) {
			return dir, tried
		}
		return "", tried
	}
	tried = append(tried, snaps+string(filepath.Separator)+"*")
	entries, err := os.ReadDir(snaps)
	if err != nil {
		return "", tried
	}
	type cand struct {
		path string
		mod  int64
	}
	var cands []cand
	for _, e := range entries {
		p := filepath.Join(snaps, e.Name())
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			continue
		}
		cands = append(cands, cand{p, st.ModTime().UnixNano()})
	}
	if len(cands) == 0 {
		return "", tried
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].mod != cands[j].mod {
			return cands[i].mod > cands[j].mod
		}
		return cands[i].path > cands[j].path
	})
	return cands[0].path, tried
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
