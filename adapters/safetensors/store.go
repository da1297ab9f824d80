// Package safetensors reads safetensors checkpoints (one file or a sharded directory) through read-only memory
// mappings, so tensor data is never copied into the Go heap unless a caller converts it, and writes small
// files for test fixtures.
package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	// ErrMissingTensor is wrapped by Store.Tensor when the name is not in the store, and by OpenDir when an
	// index names a tensor its shard does not hold.
	ErrMissingTensor = errors.New("tensor not found")
	// ErrMalformed is wrapped by every error about a file or index that does not follow the format.
	ErrMalformed = errors.New("malformed safetensors")
	// ErrNoWeights is wrapped by OpenDir when the directory holds no safetensors file.
	ErrNoWeights = errors.New("no safetensors weights")
)

// IndexFile is the name of the sharded-checkpoint index Hugging Face writes beside the shards.
const IndexFile = "model.safetensors.index.json"

// SingleFile is the conventional name of an unsharded checkpoint.
const SingleFile = "model.safetensors"

// Store is a set of tensors read from one or more mapped files. Its methods are safe for concurrent use.
// Tensors it returns (and their Data) are valid until Close.
type Store struct {
	where    string // the file or directory opened, for error messages
	maps     []mapping
	tensors  map[string]*Tensor
	names    []string
	metadata map[string]string

	mu     sync.Mutex
	used   map[string]bool
	closed bool
}

type mapping struct {
	path string
	data []byte
}

// OpenFile maps one safetensors file and validates its header (see parseHeader for the checks).
func OpenFile(path string) (*Store, error) {
	s := &Store{where: path, tensors: map[string]*Tensor{}, used: map[string]bool{}}
	h, err := s.add(path)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	s.metadata = h.metadata
	s.finish()
	return s, nil
}

// OpenDir opens a checkpoint directory: the shards listed by model.safetensors.index.json when present, else
// model.safetensors, else every *.safetensors file in the directory (sorted). A tensor name present in two
// files is an error, as is an index that names a missing shard, a shard outside the directory, or a tensor
// its shard does not hold. Tensors a shard holds beyond the index are kept (the index is a lookup aid).
func OpenDir(dir string) (*Store, error) {
	s := &Store{where: dir, tensors: map[string]*Tensor{}, used: map[string]bool{}}
	files, weightMap, err := dirFiles(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, f := range files {
		h, err := s.add(filepath.Join(dir, f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(files) == 1 {
			s.metadata = h.metadata
		}
	}
	if len(errs) == 0 {
		names := make([]string, 0, len(weightMap))
		for name := range weightMap {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			shard := weightMap[name]
			t, ok := s.tensors[name]
			if !ok || filepath.Base(t.File) != shard {
				errs = append(errs, fmt.Errorf("%s: %w: %s names tensor %q in shard %s, which does not hold it", dir, ErrMissingTensor, IndexFile, name, shard))
			}
		}
	}
	if len(errs) > 0 {
		_ = s.Close()
		return nil, errors.Join(errs...)
	}
	s.finish()
	return s, nil
}

// dirFiles lists the files OpenDir maps and, for sharded checkpoints, the index's name→shard map.
func dirFiles(dir string) ([]string, map[string]string, error) {
	idxPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(idxPath)
	switch {
	case err == nil:
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, nil, fmt.Errorf("%s: %w: %v", idxPath, ErrMalformed, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, nil, fmt.Errorf("%s: %w: weight_map is missing or empty", idxPath, ErrMalformed)
		}
		set := map[string]bool{}
		var errs []error
		for name, shard := range idx.WeightMap {
			if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
				errs = append(errs, fmt.Errorf("%s: %w: tensor %q names shard %q outside the directory", idxPath, ErrMalformed, name, shard))
				continue
			}
			if !set[shard] {
				set[shard] = true
				if _, err := os.Stat(filepath.Join(dir, shard)); err != nil {
					errs = append(errs, fmt.Errorf("%s: shard %s (holding tensor %q): %w", idxPath, shard, name, err))
				}
			}
		}
		if len(errs) > 0 {
			slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
			return nil, nil, errors.Join(errs...)
		}
		files := make([]string, 0, len(set))
		for f := range set {
			files = append(files, f)
		}
		sort.Strings(files)
		return files, idx.WeightMap, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("read %s: %w", idxPath, err)
	}
	if _, err := os.Stat(filepath.Join(dir, SingleFile)); err == nil {
		return []string{SingleFile}, nil, nil
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(matches) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, nil, fmt.Errorf("open checkpoint directory: %w", err)
		}
		return nil, nil, fmt.Errorf("%s: %w: no %s, no %s and no *.safetensors files", dir, ErrNoWeights, IndexFile, SingleFile)
	}
	files := make([]string, len(matches))
	for i, m := range matches {
		files[i] = filepath.Base(m)
	}
	sort.Strings(files)
	return files, nil, nil
}

// add maps one file, validates it and registers its tensors.
func (s *Store) add(path string) (*header, error) {
	data, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	s.maps = append(s.maps, mapping{path: path, data: data})
	h, err := parseHeader(path, data)
	if err != nil {
		return nil, err
	}
	var errs []error
	buf := data[h.dataStart:]
	for _, e := range h.tensors {
		if prev, dup := s.tensors[e.name]; dup {
			errs = append(errs, fmt.Errorf("%w: tensor %q is in both %s and %s", ErrMalformed, e.name, prev.File, path))
			continue
		}
		s.tensors[e.name] = &Tensor{
			Name:  e.name,
			DType: e.dtype,
			Shape: e.shape,
			// Full slice expression: an append by a careless caller cannot run into the next tensor.
			Data: buf[e.begin:e.end:e.end],
			File: path,
		}
	}
	return h, errors.Join(errs...)
}

// mapFile maps a whole file read-only. Zero-length files cannot be mapped and are not valid safetensors
// anyway, so they are reported as malformed here.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: not a regular file", path, ErrMalformed)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: %w: file is %d bytes, shorter than the 8-byte header length", path, ErrMalformed, size)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%s: file of %d bytes is too large to map", path, size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return data, nil
}

func (s *Store) finish() {
	s.names = make([]string, 0, len(s.tensors))
	for name := range s.tensors {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
}

// Tensor returns the named tensor and marks it used. A missing name is an error wrapping ErrMissingTensor
// that names the tensor and where the store was opened from.
func (s *Store) Tensor(name string) (*Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%s: tensor %q: store is closed", s.where, name)
	}
	t, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w: %q", s.where, ErrMissingTensor, name)
	}
	s.used[name] = true
	return t, nil
}

// Has reports whether the store holds the named tensor. It does not mark the tensor used.
func (s *Store) Has(name string) bool {
	_, ok := s.tensors[name]
	return ok
}

// Names returns every tensor name, sorted. The slice is a copy.
func (s *Store) Names() []string { return slices.Clone(s.names) }

// Metadata returns the __metadata__ map of a single-file store (nil for sharded stores or when absent).
func (s *Store) Metadata() map[string]string { return s.metadata }

// Bytes is the mapped files' total size, headers included: the weights' bytes on disk. 0 after Close.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, m := range s.maps {
		n += int64(len(m.data))
	}
	return n
}

// Where returns the file or directory the store was opened from.
func (s *Store) Where() string { return s.where }

// MarkUsed records names as consumed without fetching them, for tensors a loader deliberately ignores (for
// example vision-tower or MTP weights), so Unused reports only the unexpected ones. Unknown names are ignored.
func (s *Store) MarkUsed(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if _, ok := s.tensors[n]; ok {
			s.used[n] = true
		}
	}
}

// Unused returns, sorted, the names neither fetched with Tensor nor passed to MarkUsed. A loader that has
// consumed everything it expects calls it to refuse checkpoints carrying tensors it would silently ignore.
func (s *Store) Unused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.names {
		if !s.used[n] {
			out = append(out, n)
		}
	}
	return out
}

// Close unmaps every file. Tensor Data from this store must not be touched afterwards. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, m := range s.maps {
		if err := unix.Munmap(m.data); err != nil {
			errs = append(errs, fmt.Errorf("munmap %s: %w", m.path, err))
		}
	}
	s.maps = nil
	return errors.Join(errs...)
}
