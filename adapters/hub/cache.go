package hub

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// snapshotDir is a commit's snapshot directory in a cached repository.
func snapshotDir(repo, commit string) string { return filepath.Join(repo, "snapshots", commit) }

// blobPath is a blob's path in a cached repository.
func blobPath(repo, etag string) string { return filepath.Join(repo, "blobs", etag) }

// link points a snapshot's file at its blob with a relative symbolic link (as the Hugging Face tools do, so
// the cache can move), replacing what was there.
func link(repo, commit, file, blob string) error {
	dst := filepath.Join(snapshotDir(repo, commit), filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("hub cache: %w", err)
	}
	if err := os.Symlink(rel, dst); err != nil {
		return fmt.Errorf("hub cache: link %s: %w", dst, err)
	}
	return nil
}

// writeRef records that a revision (a branch or tag; slashes make subdirectories, as refs/pr/1) names
// commit, replacing the file atomically.
func writeRef(repo, rev, commit string) error {
	ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
	if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	tmp := ref + ".tmp"
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if err := os.Rename(tmp, ref); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	return nil
}

// complete reports whether a snapshot directory holds a whole model for the include patterns, without the
// network: every file in it resolves (no link to a missing blob); with the default patterns, config.json
// and the weights (every shard the safetensors index names, or at least one .safetensors file without an
// index); with patterns of the user's, at least one file for each. It returns the files found.
func complete(dir string, include []string, byDefault bool) ([]string, bool) {
	var names []string
	broken := false
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			broken = true
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil || broken {
		return nil, false
	}
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	if !byDefault {
		for _, p := range include {
			found := false
			for _, n := range names {
				if ok, _ := path.Match(p, n); ok {
					found = true
					break
				}
			}
			if !found {
				return names, false
			}
		}
		return names, true
	}
	if !has["config.json"] {
		return names, false
	}
	weights, indexed := false, false
	for _, n := range names {
		if strings.HasSuffix(n, ".safetensors.index.json") && !strings.Contains(n, "/") {
			indexed = true
			if !shardsPresent(filepath.Join(dir, n), has) {
				return names, false
			}
		}
		if strings.HasSuffix(n, ".safetensors") && !strings.Contains(n, "/") {
			weights = true
		}
	}
	return names, weights || indexed
}

// shardsPresent reports whether every shard a safetensors index names is among the files.
func shardsPresent(index string, has map[string]bool) bool {
	b, err := os.ReadFile(index)
	if err != nil {
		return false
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if json.Unmarshal(b, &idx) != nil || len(idx.WeightMap) == 0 {
		return false
	}
	for _, shard := range idx.WeightMap {
		if !has[shard] {
			return false
		}
	}
	return true
}
