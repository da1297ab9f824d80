// Package prefixstore is the prefix cache's disk tier on a directory: one file per record, written atomically
// (a temporary file, fsync, rename, fsync of the directory), checksummed (CRC-32C over everything after the
// checksum) and stamped with the model's identity, so that a partial, corrupt or foreign file is dropped with
// a warning and never used. It implements ports.PrefixStore; what to keep and for how long is the cache's
// policy (domain/prefixcache).
package prefixstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.PrefixStore = (*Store)(nil)

// The record file, little-endian:
//
//	magic "HGPC" | version uint16 | flags uint16 (bit 0: a drafter state) | CRC-32C (Castagnoli) uint32 of all
//	that follows | identity length uint16, identity | tenant length uint16, tenant | tokens uint32 |
//	target length uint64 | draft length uint64 | tokens (uint32 each) | target bytes | draft bytes
const (
	magic      = "HGPC"
	version    = 1
	flagDraft  = 1
	fixedHead  = 12 // magic, version, flags, checksum
	ext        = ".hpc"
	tmpMarker  = ".tmp"
	maxIdent   = 1 << 12
	maxTokens  = 1 << 24
	maxPayload = 1 << 40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options are a store's test seams.
type Options struct {
	// MidWrite, when set, runs after the first half of a record's bytes reached its temporary file and before
	// the rest (a test stops or kills the process there).
	MidWrite func()
}

// Store is a directory of one model's prefix records. Files of other models (another identity's name
// prefix) share the directory untouched. Safe for concurrent use; the directory must belong to one server.
type Store struct {
	dir      string
	identity string
	prefix   string // the identity's digest: every file name of this store starts with it
	log      zerolog.Logger
	opts     Options
}

// Open makes dir (0700) if needed and returns the store of identity's records in it. identity names the
// model exactly (weights digest, dtype, backend, kernel mode); records of any other identity are never
// returned.
func Open(dir, identity string, log zerolog.Logger, opts Options) (*Store, error) {
	switch {
	case dir == "":
		return nil, errors.New("prefix store: no directory")
	case identity == "" || len(identity) > maxIdent:
		return nil, fmt.Errorf("prefix store: model identity of %d bytes (want 1 to %d)", len(identity), maxIdent)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("prefix store: %w", err)
	}
	h := sha256.Sum256([]byte(identity))
	return &Store{dir: dir, identity: identity, prefix: hex.EncodeToString(h[:8]), log: log, opts: opts}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// name is the file of (tenant, tokens): the identity's digest, the tenant's, and a digest of the tokens (the
// header holds the tokens themselves, checked on every read).
func (s *Store) name(tenant string, tokens []ports.Token) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	tn := tenant
	if len(tn) > 16 {
		tn = tn[:16]
	}
	return s.prefix + "-" + safe(tn) + "-" + hex.EncodeToString(h.Sum(nil)[:12]) + ext
}

// safe keeps a file name to hex-like characters whatever tenant digest it is given.
func safe(s string) string {
	return strings.Map(func(r rune) rune {
		if (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') {
			return r
		}
		return '_'
	}, s)
}

// encode lays rec out as a record file.
func (s *Store) encode(rec ports.PrefixRecord) []byte {
	size := fixedHead + 2 + len(s.identity) + 2 + len(rec.Tenant) + 4 + 16 + 4*len(rec.Tokens) + len(rec.Target) + len(rec.Draft)
	b := make([]byte, fixedHead, size)
	copy(b, magic)
	binary.LittleEndian.PutUint16(b[4:], version)
	var flags uint16
	if rec.Draft != nil {
		flags |= flagDraft
	}
	binary.LittleEndian.PutUint16(b[6:], flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s.identity)))
	b = append(b, s.identity...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(rec.Tenant)))
	b = append(b, rec.Tenant...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rec.Tokens)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(rec.Target)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(rec.Draft)))
	for _, t := range rec.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	b = append(b, rec.Target...)
	b = append(b, rec.Draft...)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[fixedHead:], castagnoli))
	return b
}

// Put writes rec atomically (ports.PrefixStore).
func (s *Store) Put(ctx context.Context, rec ports.PrefixRecord) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("prefix store: %w", err)
	}
	switch {
	case len(rec.Tokens) == 0 || len(rec.Tokens) > maxTokens:
		return 0, fmt.Errorf("prefix store: a record of %d tokens", len(rec.Tokens))
	case len(rec.Tenant) > maxIdent:
		return 0, fmt.Errorf("prefix store: a tenant digest of %d bytes", len(rec.Tenant))
	}
	b := s.encode(rec)
	final := filepath.Join(s.dir, s.name(rec.Tenant, rec.Tokens))
	f, err := os.CreateTemp(s.dir, filepath.Base(final)+tmpMarker+"*")
	if err != nil {
		return 0, fmt.Errorf("prefix store: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) (int64, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("prefix store: write %s: %w", filepath.Base(final), err)
	}
	half := len(b) / 2
	if _, err := f.Write(b[:half]); err != nil {
		return fail(err)
	}
	if s.opts.MidWrite != nil {
		s.opts.MidWrite()
	}
	if _, err := f.Write(b[half:]); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("prefix store: write %s: %w", filepath.Base(final), err)
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("prefix store: %w", err)
	}
	// The rename is durable only once the directory is.
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return int64(len(b)), nil
}

// header is a record file's fields before its tokens.
type header struct {
	identity, tenant string
	draft            bool
	tokens           int
	targetN, draftN  uint64
	headLen          int // bytes up to the tokens
	checksum         uint32
}

// size is the file size the header promises.
func (h header) size() uint64 {
	return uint64(h.headLen) + 4*uint64(h.tokens) + h.targetN + h.draftN
}

var errRecord = fmt.Errorf("prefix record: %w", ports.ErrPrefixRecordInvalid)

// parseHeader reads a record's header from the start of a file (b may hold more).
func parseHeader(b []byte) (header, error) {
	var h header
	bad := func(format string, args ...any) (header, error) {
		return header{}, fmt.Errorf("%w: %s", errRecord, fmt.Sprintf(format, args...))
	}
	if len(b) < fixedHead+2 {
		return bad("%d bytes, shorter than a header", len(b))
	}
	if string(b[:4]) != magic {
		return bad("not a prefix record (magic %q)", b[:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return bad("format version %d, this build reads %d", v, version)
	}
	flags := binary.LittleEndian.Uint16(b[6:])
	if flags&^flagDraft != 0 {
		return bad("unknown flags %#x", flags)
	}
	h.draft = flags&flagDraft != 0
	h.checksum = binary.LittleEndian.Uint32(b[8:])
	p := fixedHead
	str := func() (string, bool) {
		if len(b) < p+2 {
			return "", false
		}
		n := int(binary.LittleEndian.Uint16(b[p:]))
		if n > maxIdent || len(b) < p+2+n {
			return "", false
		}
		v := string(b[p+2 : p+2+n])
		p += 2 + n
		return v, true
	}
	var ok bool
	if h.identity, ok = str(); !ok {
		return bad("truncated identity")
	}
	if h.tenant, ok = str(); !ok {
		return bad("truncated tenant")
	}
	if len(b) < p+20 {
		return bad("truncated lengths")
	}
	h.tokens = int(binary.LittleEndian.Uint32(b[p:]))
	h.targetN = binary.LittleEndian.Uint64(b[p+4:])
	h.draftN = binary.LittleEndian.Uint64(b[p+12:])
	h.headLen = p + 20
	switch {
	case h.tokens < 1 || h.tokens > maxTokens:
		return bad("%d tokens", h.tokens)
	case h.targetN < 1 || h.targetN > maxPayload || h.draftN > maxPayload:
		return bad("states of %d and %d bytes", h.targetN, h.draftN)
	case h.draft != (h.draftN > 0):
		return bad("the drafter flag disagrees with a drafter state of %d bytes", h.draftN)
	}
	return h, nil
}

// parse checks a whole record file and returns its record and identity.
func parse(b []byte) (ports.PrefixRecord, string, error) {
	h, err := parseHeader(b)
	if err != nil {
		return ports.PrefixRecord{}, "", err
	}
	if h.size() != uint64(len(b)) {
		return ports.PrefixRecord{}, "", fmt.Errorf("%w: %d bytes, the header promises %d (a partial or damaged file)", errRecord, len(b), h.size())
	}
	if sum := crc32.Checksum(b[fixedHead:], castagnoli); sum != h.checksum {
		return ports.PrefixRecord{}, "", fmt.Errorf("%w: checksum %08x, the header says %08x", errRecord, sum, h.checksum)
	}
	rec := ports.PrefixRecord{Tenant: h.tenant, Tokens: make([]ports.Token, h.tokens)}
	p := h.headLen
	for i := range rec.Tokens {
		rec.Tokens[i] = ports.Token(binary.LittleEndian.Uint32(b[p:]))
		p += 4
	}
	rec.Target = b[p : p+int(h.targetN) : p+int(h.targetN)]
	p += int(h.targetN)
	if h.draft {
		rec.Draft = b[p : p+int(h.draftN) : p+int(h.draftN)]
	}
	return rec, h.identity, nil
}

// Get reads and checks the record of (tenant, tokens) (ports.PrefixStore).
func (s *Store) Get(ctx context.Context, tenant string, tokens []ports.Token) (ports.PrefixRecord, error) {
	if err := ctx.Err(); err != nil {
		return ports.PrefixRecord{}, fmt.Errorf("prefix store: %w", err)
	}
	path := filepath.Join(s.dir, s.name(tenant, tokens))
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ports.PrefixRecord{}, fmt.Errorf("prefix store: %w", ports.ErrPrefixRecordMissing)
	}
	if err != nil {
		return ports.PrefixRecord{}, fmt.Errorf("prefix store: %w", err)
	}
	rec, identity, err := parse(b)
	if err == nil && identity != s.identity {
		err = fmt.Errorf("%w: written for another model (%q)", errRecord, identity)
	}
	if err == nil && (rec.Tenant != tenant || !slices.Equal(rec.Tokens, tokens)) {
		err = fmt.Errorf("%w: the file holds another prefix", errRecord)
	}
	if err != nil {
		s.drop(path, err)
		return ports.PrefixRecord{}, fmt.Errorf("prefix store: %s: %w", filepath.Base(path), err)
	}
	return rec, nil
}

// drop removes an unusable file, warning once.
func (s *Store) drop(path string, why error) {
	ev := s.log.Warn().Str("file", filepath.Base(path)).AnErr("reason", why)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		ev = ev.AnErr("remove", err)
	}
	ev.Msg("prefix cache: ignored an unusable disk record (removed)")
}

// Delete removes the record of (tenant, tokens) (ports.PrefixStore).
func (s *Store) Delete(tenant string, tokens []ports.Token) error {
	err := os.Remove(filepath.Join(s.dir, s.name(tenant, tokens)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("prefix store: %w", err)
	}
	return nil
}

// List reads the header of every record file of this store's identity (ports.PrefixStore). Temporary files
// (a write a killed process left), files whose size disagrees with their header, unreadable headers and
// headers of another identity are removed with a warning; checksums are checked by Get, on use.
func (s *Store) List(ctx context.Context) ([]ports.PrefixRecordInfo, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("prefix store: %w", err)
	}
	var out []ports.PrefixRecordInfo
	others := 0
	for _, de := range ents {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("prefix store: %w", err)
		}
		name := de.Name()
		if !de.Type().IsRegular() {
			continue
		}
		if !strings.HasPrefix(name, s.prefix+"-") {
			if strings.Contains(name, ext) {
				others++
			}
			continue
		}
		path := filepath.Join(s.dir, name)
		if strings.Contains(name, tmpMarker) {
			s.drop(path, errors.New("a partial write (temporary file) left by a process that stopped mid-write"))
			continue
		}
		if !strings.HasSuffix(name, ext) {
			continue
		}
		info, err := s.readInfo(path)
		if err != nil {
			s.drop(path, err)
			continue
		}
		if name != s.name(info.Tenant, info.Tokens) {
			s.drop(path, fmt.Errorf("%w: the file's name does not match its prefix", errRecord))
			continue
		}
		out = append(out, info)
	}
	if others > 0 {
		s.log.Info().Int("files", others).Str("dir", s.dir).Msg("prefix cache: the directory holds other models' records (kept, not counted)")
	}
	return out, nil
}

// readInfo reads a record file's header and tokens and checks its size.
func (s *Store) readInfo(path string) (ports.PrefixRecordInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return ports.PrefixRecordInfo{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ports.PrefixRecordInfo{}, err
	}
	head := make([]byte, min(st.Size(), int64(fixedHead+2+maxIdent+2+maxIdent+20)))
	if _, err := io.ReadFull(f, head); err != nil {
		return ports.PrefixRecordInfo{}, fmt.Errorf("%w: %w", errRecord, err)
	}
	h, err := parseHeader(head)
	if err != nil {
		return ports.PrefixRecordInfo{}, err
	}
	if h.identity != s.identity {
		return ports.PrefixRecordInfo{}, fmt.Errorf("%w: written for another model (%q)", errRecord, h.identity)
	}
	if h.size() != uint64(st.Size()) {
		return ports.PrefixRecordInfo{}, fmt.Errorf("%w: %d bytes, the header promises %d (a partial or damaged file)", errRecord, st.Size(), h.size())
	}
	toks := make([]byte, 4*h.tokens)
	if _, err := f.ReadAt(toks, int64(h.headLen)); err != nil {
		return ports.PrefixRecordInfo{}, fmt.Errorf("%w: %w", errRecord, err)
	}
	info := ports.PrefixRecordInfo{Tenant: h.tenant, Tokens: make([]ports.Token, h.tokens), Draft: h.draft, Bytes: st.Size(), Written: st.ModTime()}
	for i := range info.Tokens {
		info.Tokens[i] = ports.Token(binary.LittleEndian.Uint32(toks[4*i:]))
	}
	return info, nil
}
