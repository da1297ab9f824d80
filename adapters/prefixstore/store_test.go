package prefixstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// logBuf is a goroutine-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func open(t *testing.T, dir, identity string) (*Store, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	s, err := Open(dir, identity, zerolog.New(lb), Options{})
	require.NoError(t, err)
	return s, lb
}

func rec(tenant string, n int, draft bool) ports.PrefixRecord {
	r := ports.PrefixRecord{Tenant: tenant, Target: bytes.Repeat([]byte{byte(n), 7}, 50+n)}
	for i := range n {
		r.Tokens = append(r.Tokens, ports.Token(i*3+1))
	}
	if draft {
		r.Draft = bytes.Repeat([]byte{9}, 30)
	}
	return r
}

const ident = "sha256:abc|float32|cpu|exact"

func TestPutGetList(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, ident)
	for _, r := range []ports.PrefixRecord{rec("t1", 5, false), rec("t1", 9, true), rec("t2", 5, true)} {
		n, err := s.Put(t.Context(), r)
		require.NoError(t, err)
		assert.Equal(t, int64(len(s.encode(r))), n)
		got, err := s.Get(t.Context(), r.Tenant, r.Tokens)
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
	// Another tenant's key never reads this one's record.
	_, err := s.Get(t.Context(), "t3", rec("t1", 5, false).Tokens)
	assert.ErrorIs(t, err, ports.ErrPrefixRecordMissing)

	// A restart: a new store over the directory lists what was written.
	s2, lb := open(t, dir, ident)
	infos, err := s2.List(t.Context())
	require.NoError(t, err)
	require.Len(t, infos, 3)
	for _, in := range infos {
		r := rec(in.Tenant, len(in.Tokens), in.Draft)
		assert.Equal(t, r.Tokens, in.Tokens)
		assert.Equal(t, int64(len(s.encode(r))), in.Bytes)
		assert.WithinDuration(t, time.Now(), in.Written, time.Minute)
	}
	assert.Empty(t, lb.String(), "nothing to warn about")

	require.NoError(t, s2.Delete("t1", rec("t1", 5, false).Tokens))
	require.NoError(t, s2.Delete("t1", rec("t1", 5, false).Tokens), "deleting a missing record")
	infos, err = s2.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, infos, 2)
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestCorruptFilesAreDroppedNeverUsed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		damage func(b []byte) []byte
		// atList: List already sees the damage (a size disagreeing with the header); otherwise Get's checksum does.
		atList bool
	}{
		{"flipped payload bit", func(b []byte) []byte { b[len(b)-3] ^= 1; return b }, false},
		{"flipped token", func(b []byte) []byte {
			b[len(b)-len(rec("", 6, true).Draft)-len(rec("", 6, true).Target)-1] ^= 0x10
			return b
		}, true}, // its name no longer matches
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, true},
		{"extended", func(b []byte) []byte { return append(b, 0) }, true},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, true},
		{"empty", func([]byte) []byte { return nil }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, lb := open(t, dir, ident)
			r := rec("t", 6, true)
			_, err := s.Put(t.Context(), r)
			require.NoError(t, err)
			path := filepath.Join(dir, s.name(r.Tenant, r.Tokens))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, tt.damage(b), 0o600))

			infos, err := s.List(t.Context())
			require.NoError(t, err)
			if tt.atList {
				assert.Empty(t, infos)
			} else {
				require.Len(t, infos, 1)
				_, err = s.Get(t.Context(), r.Tenant, r.Tokens)
				assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid)
			}
			assert.Empty(t, files(t, dir), "the damaged file is removed")
			assert.Contains(t, lb.String(), "unusable disk record")
			_, err = s.Get(t.Context(), r.Tenant, r.Tokens)
			assert.ErrorIs(t, err, ports.ErrPrefixRecordMissing)
		})
	}
}

func TestForeignModel(t *testing.T) {
	dir := t.TempDir()
	a, _ := open(t, dir, ident)
	r := rec("t", 4, false)
	_, err := a.Put(t.Context(), r)
	require.NoError(t, err)

	// Another model over the same directory sees none of a's records and leaves them.
	b, lb := open(t, dir, "sha256:def|float32|cpu|exact")
	infos, err := b.List(t.Context())
	require.NoError(t, err)
	assert.Empty(t, infos)
	_, err = b.Get(t.Context(), r.Tenant, r.Tokens)
	assert.ErrorIs(t, err, ports.ErrPrefixRecordMissing)
	assert.Len(t, files(t, dir), 1, "another model's records are kept")
	assert.Contains(t, lb.String(), "other models' records")

	// a's file under b's name (copied, or a digest collision): its header says a's identity, so b drops it.
	src := filepath.Join(dir, a.name(r.Tenant, r.Tokens))
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, b.name(r.Tenant, r.Tokens)), data, 0o600))
	_, err = b.Get(t.Context(), r.Tenant, r.Tokens)
	assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid)
	require.NoError(t, os.WriteFile(filepath.Join(dir, b.name(r.Tenant, r.Tokens)), data, 0o600))
	infos, err = b.List(t.Context())
	require.NoError(t, err)
	assert.Empty(t, infos)
	assert.Contains(t, lb.String(), "another model")
	assert.Equal(t, []string{filepath.Base(src)}, files(t, dir))
}

func TestConcurrentPutsAndGets(t *testing.T) {
	s, _ := open(t, t.TempDir(), ident)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rec(fmt.Sprint("t", g%2), 3+g%3, g%2 == 0)
			for range 20 {
				_, err := s.Put(t.Context(), r)
				assert.NoError(t, err)
				got, err := s.Get(t.Context(), r.Tenant, r.Tokens)
				// A concurrent Put of the same key replaces the file whole: a reader sees one or the other.
				if assert.NoError(t, err) {
					assert.Equal(t, r, got)
				}
			}
		}()
	}
	wg.Wait()
	infos, err := s.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, infos, 6)
}

// killEnv makes the test binary the helper process of TestKilledMidWrite: it writes one record whole, then
// blocks in the middle of the second and waits to be killed.
const killEnv = "HIGGS_PREFIXSTORE_KILL_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(killEnv); dir != "" {
		midWrite := func() {
			fmt.Println("mid-write")
			select {} // until SIGKILL
		}
		s, err := Open(dir, ident, zerolog.Nop(), Options{})
		if err == nil {
			_, err = s.Put(context0(), rec("t", 5, true))
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		s.opts.MidWrite = midWrite
		_, _ = s.Put(context0(), rec("t", 8, true))
		os.Exit(2) // unreachable: MidWrite blocks
	}
	os.Exit(m.Run())
}

// TestKilledMidWrite: a process killed with SIGKILL in the middle of writing a record leaves a temporary file;
// the next start drops it with a warning, keeps the whole record and serves it.
func TestKilledMidWrite(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "mid-write\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "killed")

	names := files(t, dir)
	require.Len(t, names, 2, "the whole record and the partial one")
	partial := 0
	for _, n := range names {
		if strings.Contains(n, tmpMarker) {
			partial++
		}
	}
	require.Equal(t, 1, partial)

	s, lb := open(t, dir, ident)
	infos, err := s.List(t.Context())
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, rec("t", 5, true).Tokens, infos[0].Tokens)
	assert.Contains(t, lb.String(), "partial write")
	assert.Len(t, files(t, dir), 1, "the partial file is removed")
	got, err := s.Get(t.Context(), "t", rec("t", 5, true).Tokens)
	require.NoError(t, err)
	assert.Equal(t, rec("t", 5, true), got)
	_, err = s.Get(t.Context(), "t", rec("t", 8, true).Tokens)
	assert.ErrorIs(t, err, ports.ErrPrefixRecordMissing)
}

// FuzzParse: any bytes either parse to a record that encodes back to exactly them, or are refused as an
// invalid record; never a panic.
func FuzzParse(f *testing.F) {
	s, err := Open(f.TempDir(), ident, zerolog.Nop(), Options{})
	require.NoError(f, err)
	for _, r := range []ports.PrefixRecord{rec("t", 3, false), rec("u", 2, true)} {
		b := s.encode(r)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, identity, err := parse(b)
		if err != nil {
			assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid)
			return
		}
		o := &Store{identity: identity}
		assert.Equal(t, b, o.encode(r))
	})
}

func context0() context.Context { return context.Background() }
