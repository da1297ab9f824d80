package serve

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/prefixstore"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// The helper process of TestPrefixCacheDiskKilledMidWrite: HIGGS_SERVE_KILL_DIR names the cache directory,
// HIGGS_SERVE_KILL_MODEL the target.
const (
	killDirEnv   = "HIGGS_SERVE_KILL_DIR"
	killModelEnv = "HIGGS_SERVE_KILL_MODEL"
	killIdentity = "test-weights:kill"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(killDirEnv); dir != "" {
		if err := killHelper(dir, os.Getenv(killModelEnv)); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(2) // unreachable: the helper blocks mid-write until it is killed
	}
	os.Exit(m.Run())
}

func killReq(msgs ...ports.ChatMessage) ports.GenerateRequest {
	return ports.GenerateRequest{Messages: msgs, MaxTokens: 8, BlockSize: 1, Tenant: "a"}
}

var killSys = ports.ChatMessage{Role: "system", Content: "You are the helper that dies in the middle of a write"}

// killHelper serves one request with a disk tier in dir and flushes it (whole records), then writes one more
// record through the same store code with a hook that blocks half-way, and says so on stdout.
func killHelper(dir, model string) error {
	ctx := context.Background()
	tg, err := cpu.Load(ctx, model, cpu.LoadOptions{Threads: 1})
	if err != nil {
		return err
	}
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 1, PrefixCacheBytes: 64 << 20, PrefixCacheEvery: 8,
		PrefixCacheDir: dir, PrefixCacheDiskBytes: 64 << 20}, zerolog.Nop())
	if err != nil {
		return err
	}
	e := Engine{Target: tg, Tokenizer: srvTokenizer{}, Template: srvTemplate{}, EOS: []ports.Token{srvEOS}, Name: "cpu", Identity: killIdentity}
	if err := s.SetEngine(e); err != nil {
		return err
	}
	if _, err := s.Generate(ctx, killReq(killSys, ports.ChatMessage{Role: "user", Content: "first"}), nil); err != nil {
		return err
	}
	if _, err := s.FlushPrefixCache(ctx); err != nil {
		return err
	}
	// A longer prefix's state, written as the disk tier writes it, until the hook stops the process.
	sess, err := tg.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	long := srvTokens(strings.Repeat("a longer conversation ", 4))
	if _, err := sess.Forward(ctx, long, ports.ForwardOptions{}); err != nil {
		return err
	}
	st, err := sess.(ports.PrefixExporter).ExportPrefix(len(long))
	if err != nil {
		return err
	}
	b, err := tg.EncodePrefix(st)
	if err != nil {
		return err
	}
	store, err := prefixstore.Open(dir, killIdentity, zerolog.Nop(), prefixstore.Options{MidWrite: func() {
		fmt.Println("mid-write")
		select {}
	}})
	if err != nil {
		return err
	}
	_, err = store.Put(ctx, ports.PrefixRecord{Tenant: prefixcache.TenantDigest("a"), Tokens: long, Target: b})
	return err
}

// TestPrefixCacheDiskKilledMidWrite: a server process killed with SIGKILL in the middle of writing a record
// leaves a partial file; the next start drops it with a warning, restores the whole records, and serves
// exactly what a server without a cache serves.
func TestPrefixCacheDiskKilledMidWrite(t *testing.T) {
	model := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 41, Vocab: srvModelVocab})
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir, killModelEnv+"="+model)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "mid-write\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Error(t, cmd.Wait())

	partial, err := filepath.Glob(filepath.Join(dir, "*.tmp*"))
	require.NoError(t, err)
	require.Len(t, partial, 1, "the killed write left its temporary file")

	tg, err := cpu.Load(t.Context(), model, cpu.LoadOptions{Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	e := Engine{Target: tg, Tokenizer: srvTokenizer{}, Template: srvTemplate{}, EOS: []ports.Token{srvEOS}, Name: "cpu", Identity: killIdentity}
	off := newServeWith(t, e, 0, 0)
	logs := &strings.Builder{}
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 1, PrefixCacheBytes: 64 << 20, PrefixCacheEvery: 8,
		PrefixCacheDir: dir, PrefixCacheDiskBytes: 64 << 20}, zerolog.New(logs))
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(e))
	assert.Contains(t, logs.String(), "partial write")
	partial, err = filepath.Glob(filepath.Join(dir, "*.tmp*"))
	require.NoError(t, err)
	assert.Empty(t, partial, "the partial file is removed")
	assert.Positive(t, s.PrefixCacheStats().DiskEntries, "the whole records are kept")

	first := killReq(killSys, ports.ChatMessage{Role: "user", Content: "first"})
	want, got := gen(t, off, first), gen(t, s, first)
	assert.Equal(t, want.Content, got.Content)
	assert.Positive(t, got.CachedTokens, "restored from the dead process's records")
	assert.Equal(t, int64(1), s.PrefixCacheStats().DiskHits)
	next := killReq(killSys, ports.ChatMessage{Role: "user", Content: "first"},
		ports.ChatMessage{Role: "assistant", Content: want.Content}, ports.ChatMessage{Role: "user", Content: "second"})
	assert.Equal(t, gen(t, off, next).Content, gen(t, s, next).Content)
}
