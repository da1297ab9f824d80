package hub

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/hub/hubtest"
)

// isolate points every cache variable into a temporary directory and returns the hub cache root.
func isolate(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	cache := filepath.Join(root, "hub")
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HOME", filepath.Join(root, "hfhome"))
	t.Setenv("HOME", filepath.Join(root, "home"))
	return cache
}

// client is a client of srv writing into cache, retrying at once.
func client(srv *hubtest.Server, cache string) *Client {
	return &Client{Endpoint: srv.URL(), Cache: cache, HTTP: &http.Client{}}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// model is a small repository: what a model needs, and what it does not.
func model() map[string][]byte {
	return map[string][]byte{
		"config.json":                       []byte(`{"model_type":"qwen3"}`),
		"generation_config.json":            []byte(`{"max_new_tokens":64}`),
		"tokenizer.json":                    randomBytes(20<<10, 1), // an LFS file by size
		"tokenizer_config.json":             []byte(`{}`),
		"model.safetensors":                 randomBytes(300<<10, 2),
		"README.md":                         []byte("# a model\n"),
		"pytorch_model.bin":                 randomBytes(1000, 3),
		"original/consolidated.safetensors": randomBytes(1000, 4),
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestPullLayout(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	files := model()
	commit := srv.Add("Qwen/Qwen3-4B", files)
	var events []Event
	c := client(srv, cache)
	c.Progress = func(e Event) { events = append(events, e) }
	res, err := c.Pull(t.Context(), hfmodel.HubID{Org: "Qwen", Name: "Qwen3-4B"}, Options{})
	require.NoError(t, err)
	repo := filepath.Join(cache, "models--Qwen--Qwen3-4B")
	snap := filepath.Join(repo, "snapshots", commit)
	assert.Equal(t, snap, res.Dir)
	assert.Equal(t, commit, res.Commit)
	assert.False(t, res.FromCache)
	assert.ElementsMatch(t, []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}, res.Files)
	assert.Equal(t, int64(len(files["config.json"])+len(files["generation_config.json"])+len(files["tokenizer.json"])+
		len(files["tokenizer_config.json"])+len(files["model.safetensors"])), res.Fetched)

	// Each file is a relative link to its blob, named by its etag (an LFS file's is its sha256).
	for _, name := range res.Files {
		target, err := os.Readlink(filepath.Join(snap, name))
		require.NoError(t, err, name)
		assert.True(t, strings.HasPrefix(target, filepath.Join("..", "..", "blobs")+string(filepath.Separator)), target)
		got, err := os.ReadFile(filepath.Join(snap, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(files[name], got), name)
	}
	target, _ := os.Readlink(filepath.Join(snap, "model.safetensors"))
	assert.Equal(t, filepath.Join("..", "..", "blobs", sha(files["model.safetensors"])), target)
	ref, err := os.ReadFile(filepath.Join(repo, "refs", "main"))
	require.NoError(t, err)
	assert.Equal(t, commit, string(ref))
	for _, skipped := range []string{"README.md", "pytorch_model.bin", "original"} {
		assert.NoFileExists(t, filepath.Join(snap, skipped))
	}
	// The existing hub-id resolution finds it.
	dir, err := hfmodel.Resolve("Qwen/Qwen3-4B")
	require.NoError(t, err)
	assert.Equal(t, snap, dir)

	// LFS files came from the storage server, after a HEAD to the hub that did not follow the redirect.
	reqs := strings.Join(srv.Requests(), "\n")
	assert.Contains(t, reqs, "GET /api/models/Qwen/Qwen3-4B/revision/main")
	assert.Contains(t, reqs, "HEAD /Qwen/Qwen3-4B/resolve/"+commit+"/model.safetensors")
	assert.Contains(t, reqs, "GET /blobs/"+sha(files["model.safetensors"])+"/model.safetensors")
	assert.NotContains(t, reqs, "pytorch_model.bin")
	last := map[string]Event{}
	for _, e := range events {
		last[e.File] = e
	}
	for _, name := range res.Files {
		assert.True(t, last[name].Finished, name)
		assert.Equal(t, int64(len(files[name])), last[name].Done, name)
	}
}

func TestPullOfflineFirst(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	srv.Add("o/m", model())
	c := client(srv, cache)
	id := hfmodel.HubID{Org: "o", Name: "m"}

	c.Offline = true
	_, err := c.Pull(t.Context(), id, Options{})
	require.ErrorIs(t, err, ErrOffline)
	assert.ErrorContains(t, err, "HF_HUB_OFFLINE")
	assert.Empty(t, srv.Requests(), "offline: no request")

	c.Offline = false
	first, err := c.Pull(t.Context(), id, Options{})
	require.NoError(t, err)
	n := len(srv.Requests())

	// A complete snapshot answers without the network, online or not.
	for _, offline := range []bool{false, true} {
		c.Offline = offline
		again, err := c.Pull(t.Context(), id, Options{})
		require.NoError(t, err)
		assert.True(t, again.FromCache)
		assert.Equal(t, first.Dir, again.Dir)
		assert.Equal(t, first.Commit, again.Commit)
		assert.Len(t, srv.Requests(), n, "offline-first: no request")
	}

	// Refresh asks the hub but downloads nothing already there.
	c.Offline = false
	fresh, err := c.Pull(t.Context(), id, Options{Refresh: true})
	require.NoError(t, err)
	assert.False(t, fresh.FromCache)
	assert.Zero(t, fresh.Fetched)
	assert.Len(t, srv.Requests(), n+1, "only the model info")

	// A snapshot missing a weight shard is not complete: offline says so.
	require.NoError(t, os.Remove(filepath.Join(first.Dir, "model.safetensors")))
	c.Offline = true
	_, err = c.Pull(t.Context(), id, Options{})
	require.ErrorIs(t, err, ErrOffline)
	assert.ErrorContains(t, err, "only partly")
	// Online, it fetches the link back without a download: the blob is there.
	c.Offline = false
	fixed, err := c.Pull(t.Context(), id, Options{})
	require.NoError(t, err)
	assert.Zero(t, fixed.Fetched)
	assert.FileExists(t, filepath.Join(first.Dir, "model.safetensors"))
}

func TestPullResumesDroppedDownload(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	files := model()
	srv.Add("o/m", files)
	id := hfmodel.HubID{Org: "o", Name: "m"}
	size := len(files["model.safetensors"])

	t.Run("within one pull", func(t *testing.T) {
		srv.DropAfter("model.safetensors", 100_000)
		res, err := client(srv, cache).Pull(t.Context(), id, Options{})
		require.NoError(t, err)
		assert.Contains(t, srv.Requests(), "GET /blobs/"+sha(files["model.safetensors"])+"/model.safetensors bytes=100000-")
		got, err := os.ReadFile(filepath.Join(res.Dir, "model.safetensors"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(files["model.safetensors"], got))
	})

	t.Run("across pulls", func(t *testing.T) {
		cache := filepath.Join(t.TempDir(), "hub")
		t.Setenv("HF_HUB_CACHE", cache)
		c := client(srv, cache)
		c.Attempts = 1
		srv.DropAfter("model.safetensors", 70_000)
		_, err := c.Pull(t.Context(), id, Options{})
		require.Error(t, err)
		assert.ErrorContains(t, err, "stopped at 70000 of "+strconv.Itoa(size))
		assert.ErrorContains(t, err, "pulling again resumes")
		part := filepath.Join(cache, "models--o--m", "blobs", sha(files["model.safetensors"])+".incomplete")
		st, err := os.Stat(part)
		require.NoError(t, err)
		assert.Equal(t, int64(70_000), st.Size())
		res, err := c.Pull(t.Context(), id, Options{})
		require.NoError(t, err)
		// The blobs of the files listed before the weights were fetched by the first pull; the weights resume; the rest
		// come whole.
		assert.Equal(t, int64(size-70_000+len(files["tokenizer.json"])+len(files["tokenizer_config.json"])), res.Fetched)
		assert.NoFileExists(t, part)
		got, err := os.ReadFile(filepath.Join(res.Dir, "model.safetensors"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(files["model.safetensors"], got))
	})
}

// A storage server without range support sends the whole file again: the partial download starts over.
func TestPullWithoutRangeSupport(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	files := model()
	srv.Add("o/m", files)
	srv.IgnoreRange = true
	srv.DropAfter("model.safetensors", 50_000)
	res, err := client(srv, cache).Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m"}, Options{})
	require.NoError(t, err)
	var total int64
	for _, name := range res.Files {
		total += int64(len(files[name]))
	}
	assert.Equal(t, total+50_000, res.Fetched, "the cut 50000 bytes are fetched twice")
	got, err := os.ReadFile(filepath.Join(res.Dir, "model.safetensors"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(files["model.safetensors"], got))
}

func FuzzRangeStart(f *testing.F) {
	for _, s := range []string{"bytes 100-199/200", "bytes */200", "items 1-2/3", "bytes -5-/3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := rangeStart(s)
		if err != nil {
			return
		}
		// Only "bytes DIGITS-…" parses, to the number it starts with.
		digits, _, _ := strings.Cut(strings.TrimPrefix(s, "bytes "), "-")
		assert.True(t, strings.HasPrefix(s, "bytes "), s)
		want, perr := strconv.ParseInt(digits, 10, 64)
		require.NoError(t, perr, s)
		assert.Equal(t, want, n)
		assert.GreaterOrEqual(t, n, int64(0))
	})
}

func TestPullCorruptedFile(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	files := model()
	commit := srv.Add("o/m", files)
	srv.Corrupt("o/m", "model.safetensors")
	_, err := client(srv, cache).Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m"}, Options{})
	require.ErrorIs(t, err, ErrChecksum)
	assert.ErrorContains(t, err, "model.safetensors has sha256")
	assert.ErrorContains(t, err, sha(files["model.safetensors"]))
	blobs := filepath.Join(cache, "models--o--m", "blobs")
	assert.NoFileExists(t, filepath.Join(blobs, sha(files["model.safetensors"])))
	assert.NoFileExists(t, filepath.Join(blobs, sha(files["model.safetensors"])+".incomplete"))
	assert.NoFileExists(t, filepath.Join(cache, "models--o--m", "snapshots", commit, "model.safetensors"))
	_, err = hfmodel.Resolve("o/m")
	require.ErrorIs(t, err, hfmodel.ErrModelNotFound, "no ref is written for a failed pull")
}

func TestPullGated(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	srv.Token = "hf_secret"
	srv.Add("meta/gated", model())
	srv.Gate("meta/gated")
	id := hfmodel.HubID{Org: "meta", Name: "gated"}
	c := client(srv, cache)
	_, err := c.Pull(t.Context(), id, Options{})
	require.ErrorIs(t, err, ErrUnauthorized)
	assert.ErrorContains(t, err, "401")
	assert.ErrorContains(t, err, "HF_TOKEN")
	assert.ErrorContains(t, err, "restricted", "the hub's own message")

	c.Token = "hf_wrong"
	_, err = c.Pull(t.Context(), id, Options{})
	require.ErrorIs(t, err, ErrUnauthorized)

	// With the token: the hub gets it, the storage server never does (it answers 400 if it does).
	c.Token = "hf_secret"
	_, err = c.Pull(t.Context(), id, Options{})
	require.NoError(t, err)
}

func TestPullErrors(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	srv.Add("o/m", model())
	srv.Add("o/binonly", map[string][]byte{"config.json": []byte(`{}`), "pytorch_model.bin": []byte("x")})
	c := client(srv, cache)

	_, err := c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "nope"}, Options{})
	require.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, "no such repository")

	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m", Revision: "v9"}, Options{})
	require.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, "o/m@v9")

	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "binonly"}, Options{})
	require.Error(t, err)
	assert.ErrorContains(t, err, "no safetensors weights")
	assert.ErrorContains(t, err, "pytorch_model.bin")

	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m"}, Options{Include: []string{"*.gguf"}})
	assert.ErrorContains(t, err, "no file matches *.gguf")

	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m"}, Options{Include: []string{"[x"}})
	assert.ErrorContains(t, err, `--include "[x"`)

	// Nothing listens: the error names the endpoint and what to do offline.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	c = &Client{Endpoint: dead, Cache: cache, HTTP: &http.Client{}}
	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m"}, Options{})
	require.ErrorIs(t, err, ErrUnreachable)
	assert.ErrorContains(t, err, dead)
	assert.ErrorContains(t, err, "HF_HUB_OFFLINE=1")
	assert.ErrorContains(t, err, "local model directory")
}

func TestPullIncludeAndRevision(t *testing.T) {
	cache := isolate(t)
	srv := hubtest.New(t)
	commit := srv.Add("o/m", model())
	c := client(srv, cache)
	res, err := c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m", Revision: commit}, Options{Include: []string{"*.json", "original/*"}})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"original/consolidated.safetensors"}, res.Files)
	target, err := os.Readlink(filepath.Join(res.Dir, "original", "consolidated.safetensors"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(target, filepath.Join("..", "..", "..", "blobs")), target)
	assert.NoDirExists(t, filepath.Join(cache, "models--o--m", "refs"), "a commit needs no ref")
	dir, err := hfmodel.Resolve("o/m@" + commit)
	require.NoError(t, err)
	assert.Equal(t, res.Dir, dir)
	// The same includes are complete offline; the default set is not (no weights at the top).
	c.Offline = true
	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m", Revision: commit}, Options{Include: []string{"*.json", "original/*"}})
	require.NoError(t, err)
	_, err = c.Pull(t.Context(), hfmodel.HubID{Org: "o", Name: "m", Revision: commit}, Options{})
	require.ErrorIs(t, err, ErrOffline)
}

func TestFromEnv(t *testing.T) {
	root := isolate(t)
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c, err := FromEnv(getenv)
	require.NoError(t, err)
	assert.Equal(t, DefaultEndpoint, c.Endpoint)
	assert.Equal(t, root, c.Cache)
	assert.False(t, c.Offline)
	assert.Empty(t, c.Token)

	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("hf_file\n"), 0o600))
	env["HF_TOKEN_PATH"] = tokenFile
	env["HF_ENDPOINT"] = "http://127.0.0.1:9/"
	env["HF_HUB_OFFLINE"] = "true"
	c, err = FromEnv(getenv)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:9", c.Endpoint)
	assert.Equal(t, "hf_file", c.Token)
	assert.True(t, c.Offline)
	env["HF_TOKEN"] = "hf_env"
	c, err = FromEnv(getenv)
	require.NoError(t, err)
	assert.Equal(t, "hf_env", c.Token, "HF_TOKEN wins over the file")

	env["HF_ENDPOINT"] = "huggingface.co"
	_, err = FromEnv(getenv)
	assert.ErrorContains(t, err, "HF_ENDPOINT")
}

func TestPatterns(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"config.json", true}, {"model-00001-of-00002.safetensors", true}, {"model.safetensors.index.json", true},
		{"chat_template.jinja", true}, {"README.md", false}, {"original/model.safetensors", false},
		{"pytorch_model.bin", false}, {"model.gguf", false},
	} {
		assert.Equal(t, tc.want, included(tc.name, DefaultInclude), tc.name)
	}
	for _, bad := range []string{"", "/abs", "a//b", "../x", "a/../b", "a\\b", "./a"} {
		assert.False(t, safeName(bad), bad)
	}
	for _, bad := range []string{"", "..", "a/b", `"x"`, strings.Repeat("a", 129)} {
		assert.False(t, safeToken(bad), bad)
	}
	assert.Equal(t, "abc", normalizeEtag(`W/"abc"`))
}

func FuzzParseInfo(f *testing.F) {
	f.Add([]byte(`{"sha":"0123456789abcdef0123456789abcdef01234567","siblings":[{"rfilename":"config.json","size":2}]}`))
	f.Add([]byte(`{"sha":"0123456789abcdef0123456789abcdef01234567","siblings":[{"rfilename":"../x"}]}`))
	f.Add([]byte(`{"sha":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseInfo(b)
		if err != nil {
			return
		}
		// Whatever parses names only paths that stay inside a snapshot.
		for _, s := range info.Siblings {
			p := filepath.Join("snap", filepath.FromSlash(s.Name))
			rel, err := filepath.Rel("snap", p)
			require.NoError(t, err)
			assert.False(t, rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)), s.Name)
		}
	})
}

// TestFetchStopsPastTheListedSize: a download server that sends more than the hub lists (here without end)
// is cut one byte past the listed size with a protocol error, and the partial file is emptied, instead of
// filling the disk.
func TestFetchStopsPastTheListedSize(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 1<<12 && r.Context().Err() == nil; i++ { // up to 256 MiB
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	part := filepath.Join(t.TempDir(), "blob.incomplete")
	c := &Client{Endpoint: srv.URL, HTTP: &http.Client{}}
	_, err := c.fetchOnce(t.Context(), Event{File: "model.safetensors"}, srv.URL+"/blob", part, 1000)
	require.ErrorIs(t, err, ErrProtocol)
	assert.Contains(t, err.Error(), "more than the 1000 bytes")
	st, err := os.Stat(part)
	require.NoError(t, err)
	assert.Zero(t, st.Size())
}
