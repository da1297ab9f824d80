package hub

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/higgs-go/higgs/adapters/hfmodel"
)

// Options choose what a pull fetches.
type Options struct {
	// Include are the files to fetch, as path.Match patterns over the repository's slash-separated names
	// (nil: DefaultInclude).
	Include []string
	// Refresh asks the hub for the revision's commit even when a complete snapshot is in the cache (a branch
	// may have moved); HF_HUB_OFFLINE still wins.
	Refresh bool
}

// Result is where a pull left the model.
type Result struct {
	// Dir is the snapshot directory (what hfmodel.Resolve returns for the id).
	Dir string
	// Commit is the snapshot's commit ("" when found offline without a ref naming it).
	Commit string
	// Files are the repository files fetched or found, slash-separated.
	Files []string
	// Fetched is the number of bytes downloaded (0 when everything was in the cache).
	Fetched int64
	// FromCache is set when the cache answered without the network.
	FromCache bool
}

// Pull makes the revision of id present in the cache and returns its snapshot directory. Offline first: a
// complete snapshot already there answers without the network (unless opt.Refresh), and with c.Offline only
// the cache answers (ErrOffline when it does not hold the model). Otherwise it asks the hub for the
// revision's commit and files, fetches the included files that are missing (resuming partial downloads,
// checking LFS files' sha256), links them into the snapshot and records the revision's commit in refs/.
func (c *Client) Pull(ctx context.Context, id hfmodel.HubID, opt Options) (Result, error) {
	include := opt.Include
	byDefault := len(include) == 0
	if byDefault {
		include = DefaultInclude
	}
	if err := checkPatterns(include); err != nil {
		return Result{}, err
	}
	if !opt.Refresh || c.Offline {
		dir, looked := c.cached(id)
		if dir != "" {
			if files, ok := complete(dir, include, byDefault); ok {
				return Result{Dir: dir, Commit: commitOf(dir), Files: files, FromCache: true}, nil
			}
		}
		if c.Offline {
			why := "is not in the cache"
			if dir != "" {
				why = "is only partly in the cache (" + dir + ")"
			}
			return Result{}, fmt.Errorf("%w: HF_HUB_OFFLINE is set and %s %s (looked at %s); unset it to download, "+
				"or pass a local model directory", ErrOffline, id, why, strings.Join(looked, ", "))
		}
	}
	info, err := c.info(ctx, id)
	if err != nil {
		return Result{}, err
	}
	var files []sibling
	for _, s := range info.Siblings {
		if included(s.Name, include) {
			files = append(files, s)
		}
	}
	if len(files) == 0 {
		return Result{}, fmt.Errorf("%s@%s: no file matches %s (the repository holds %s)", id.Repo(), info.SHA,
			strings.Join(include, " "), listNames(info.Siblings, 12))
	}
	if byDefault && !slices.ContainsFunc(files, func(s sibling) bool { return strings.HasSuffix(s.Name, ".safetensors") }) {
		return Result{}, fmt.Errorf("%s@%s has no safetensors weights at its top level (it holds %s); higgs reads "+
			"safetensors only — choose other files with --include if this is what you want", id.Repo(), info.SHA,
			listNames(info.Siblings, 12))
	}
	repo := id.RepoDir(c.Cache)
	res := Result{Commit: info.SHA, Dir: snapshotDir(repo, info.SHA)}
	blobs := make([]string, len(files))
	for i, f := range files {
		blob, n, err := c.fetchFile(ctx, id, repo, info.SHA, f)
		res.Fetched += n
		if err != nil {
			return res, err
		}
		blobs[i] = blob
	}
	for i, f := range files {
		if blobs[i] != "" {
			if err := link(repo, info.SHA, f.Name, blobs[i]); err != nil {
				return res, err
			}
		}
		res.Files = append(res.Files, f.Name)
	}
	if id.Rev() != info.SHA {
		if err := writeRef(repo, id.Rev(), info.SHA); err != nil {
			return res, err
		}
	}
	return res, nil
}

// cached finds the id's snapshot in the client's cache, then wherever hfmodel.Resolve would.
func (c *Client) cached(id hfmodel.HubID) (string, []string) {
	if dir, looked := id.CachedIn(c.Cache); dir != "" {
		return dir, looked
	}
	return id.Cached()
}

// listNames lists up to n file names, then how many more.
func listNames(s []sibling, n int) string {
	if len(s) == 0 {
		return "no file"
	}
	names := make([]string, 0, n)
	for i, f := range s {
		if i == n {
			names = append(names, fmt.Sprintf("and %d more", len(s)-n))
			break
		}
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// commitOf is the commit a snapshot directory is named after ("" when the name is not one).
func commitOf(dir string) string {
	if base := path.Base(strings.ReplaceAll(dir, "\\", "/")); commitRE.MatchString(base) {
		return base
	}
	return ""
}

// retryable reports whether another attempt at a download may succeed.
func retryable(err error) bool {
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, ErrUnauthorized) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrChecksum)
}
