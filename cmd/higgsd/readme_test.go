package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/toolenv"
	"github.com/higgs-go/higgs/internal/readme"
)

// TestREADMECommands checks every higgsd command README.md and docs/*.md show (their flags must make a valid
// configuration), then serves the bundled model as `go run ./cmd/higgsd` does, through the real wiring, and
// runs every curl command of those pages against it: each must succeed, and where a page shows the response
// that follows, the generated text must be the one shown (greedy decoding is deterministic).
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("serves the demo model; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	files, err := readme.Files(root)
	require.NoError(t, err)
	type page struct {
		name   string
		cmds   []readme.Command
		blocks []readme.Block
	}
	var pages []page
	for _, f := range files {
		cmds, blocks, err := readme.Commands(f, map[string]string{"HOME": t.TempDir()})
		require.NoError(t, err)
		name, err := filepath.Rel(root, f)
		require.NoError(t, err)
		pages = append(pages, page{name, cmds, blocks})
	}
	t.Chdir(root)
	noEnv := func(string) string { return "" }
	var daemons, curls int
	// tools are the shellenv and exec commands, run against the server below.
	type tool struct {
		page string
		line int
		args []string
	}
	var tools []tool
	for _, p := range pages {
		for _, c := range p.cmds {
			args := c.Args
			switch {
			case args[0] == "bin/higgsd":
				args = args[1:]
			case len(args) > 2 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/higgsd":
				args = args[3:]
			default:
				continue
			}
			if len(args) > 0 && args[0] == "pull" {
				continue // TestREADMEPullCommands runs them
			}
			if len(args) > 0 && (args[0] == "shellenv" || args[0] == "exec") {
				tools = append(tools, tool{p.name, c.Line, args})
				continue
			}
			if len(args) > 0 && args[0] == "doctor" {
				args = args[1:] // doctor takes serve's flags
			}
			daemons++
			_, err := app.LoadConfig(args, noEnv, io.Discard)
			assert.NoError(t, err, "%s:%d: higgsd %s", p.name, c.Line, strings.Join(args, " "))
		}
	}
	require.Positive(t, daemons, "README.md and docs/ show no higgsd command")

	cfg, err := app.LoadConfig([]string{"--port", "0"}, noEnv, io.Discard)
	require.NoError(t, err)
	srv, err := initServer(cfg, zerolog.Nop())
	require.NoError(t, err)
	addr := make(chan net.Addr, 1)
	srv.OnListen = func(a net.Addr) { addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	base := "http://" + (<-addr).String()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	require.Eventually(t, func() bool {
		r, err := hc.Get(base + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond, "the demo did not load")

	for _, tl := range tools {
		checkTool(t, tl.page, tl.line, tl.args, base)
	}
	require.NotEmpty(t, tools, "docs show no higgsd shellenv or exec command")

	for _, p := range pages {
		for _, c := range p.cmds {
			if c.Args[0] != "curl" {
				continue
			}
			curls++
			req := curlRequest(t, p.name, c, base)
			resp, err := hc.Do(req)
			require.NoError(t, err, "%s:%d", p.name, c.Line)
			if resp.Header.Get("Content-Type") == "text/event-stream" {
				// The event stream never ends by itself: its first event is the hello.
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				resp.Body.Close()
				require.NoError(t, err)
				assert.Contains(t, line, `"type":"hello"`, "%s:%d", p.name, c.Line)
				continue
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s:%d: %s", p.name, c.Line, body)
			if req.URL.Path == "/v1/system" {
				var sys struct {
					Object string            `json:"object"`
					Models []json.RawMessage `json:"models"`
				}
				require.NoError(t, json.Unmarshal(body, &sys), "%s:%d: %s", p.name, c.Line, body)
				assert.Equal(t, "system", sys.Object, "%s:%d", p.name, c.Line)
				assert.Len(t, sys.Models, 1, "%s:%d: %s", p.name, c.Line, body)
				continue
			}
			if path := req.URL.Path; path == "/tokenize" || path == "/detokenize" {
				// No generated text: the answer is ids or text back, checked for its shape.
				var shape map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(body, &shape), "%s:%d: %s", p.name, c.Line, body)
				assert.True(t, shape["tokens"] != nil || shape["prompt"] != nil, "%s:%d: %s", p.name, c.Line, body)
				continue
			}
			if req.URL.Path == "/v1/embeddings" {
				// Vectors, not text: each input's embedding is there, of unit length.
				var emb struct {
					Object string `json:"object"`
					Data   []struct {
						Index     int       `json:"index"`
						Embedding []float64 `json:"embedding"`
					} `json:"data"`
				}
				require.NoError(t, json.Unmarshal(body, &emb), "%s:%d: %s", p.name, c.Line, body)
				assert.Equal(t, "list", emb.Object, "%s:%d", p.name, c.Line)
				require.NotEmpty(t, emb.Data, "%s:%d", p.name, c.Line)
				for i, d := range emb.Data {
					assert.Equal(t, i, d.Index, "%s:%d", p.name, c.Line)
					var sq float64
					for _, v := range d.Embedding {
						sq += v * v
					}
					assert.InDelta(t, 1, sq, 1e-4, "%s:%d: embedding %d is L2-normalised", p.name, c.Line, i)
				}
				continue
			}
			got := answerText(t, body)
			// The response the page shows is the next block, when it is JSON.
			if i := c.Block + 1; i < len(p.blocks) && p.blocks[i].Lang == "json" {
				assert.Equal(t, answerText(t, []byte(p.blocks[i].Text)), got,
					"%s:%d: the page shows another answer than the bundled model gives (block at line %d)", p.name, c.Line, p.blocks[i].Line)
			}
		}
	}
	assert.Positive(t, curls, "README.md and docs/ show no curl command")
	t.Logf("%d higgsd and %d curl commands checked", daemons, curls)
}

// TestREADMEPullCommands runs every `higgsd pull` command README.md and docs/*.md show, as written, against
// a local hub serving the demo model under each target id they name and the demo drafter under each known
// drafter of those targets (no network); each must succeed and leave its models where the hub-id resolution
// finds them.
func TestREADMEPullCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	files, err := readme.Files(root)
	require.NoError(t, err)
	srv, _ := pullEnv(t)
	type shown struct {
		where string
		args  []string
	}
	var pulls []shown
	for _, f := range files {
		cmds, _, err := readme.Commands(f, map[string]string{"HOME": t.TempDir()})
		require.NoError(t, err)
		name, err := filepath.Rel(root, f)
		require.NoError(t, err)
		for _, c := range cmds {
			args := c.Args
			switch {
			case args[0] == "bin/higgsd":
				args = args[1:]
			case len(args) > 2 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/higgsd":
				args = args[3:]
			default:
				continue
			}
			if len(args) == 0 || args[0] != "pull" {
				continue
			}
			cfg, err := app.ParsePull(args[1:], io.Discard)
			require.NoError(t, err, "%s:%d", name, c.Line)
			for _, id := range cfg.IDs {
				if !isKnownDrafter(repoOf(id)) {
					srv.AddDir(t, repoOf(id), filepath.Join(root, models.DemoTargetDir))
				}
				for _, p := range hfmodel.DraftersFor(id) {
					srv.AddDir(t, p.Drafter, filepath.Join(root, models.DemoDrafterDir))
				}
			}
			pulls = append(pulls, shown{fmt.Sprintf("%s:%d", name, c.Line), args[1:]})
		}
	}
	require.NotEmpty(t, pulls, "README.md and docs/ show no higgsd pull command")
	for _, p := range pulls {
		var out, errb strings.Builder
		code := runPull(t.Context(), p.args, &out, &errb)
		require.Equal(t, 0, code, "%s: higgsd pull %s\n%s", p.where, strings.Join(p.args, " "), errb.String())
		for _, dir := range strings.Fields(out.String()) {
			assert.DirExists(t, dir, p.where)
		}
	}
}

// isKnownDrafter reports whether repo is a drafter of hfmodel.KnownDrafters (served as the demo drafter).
func isKnownDrafter(repo string) bool {
	for _, p := range hfmodel.KnownDrafters {
		if p.Drafter == repo {
			return true
		}
	}
	return false
}

// repoOf is a hub id without its revision.
func repoOf(id string) string {
	repo, _, _ := strings.Cut(id, "@")
	return repo
}

// checkTool runs a shellenv or exec command a page shows against the server at base (its --addr): shellenv
// must print the server's variables, exec's command must run with them and succeed.
func checkTool(t *testing.T, page string, line int, args []string, base string) {
	t.Helper()
	withAddr := append([]string{"--addr", base}, args[1:]...)
	var stdout, stderr strings.Builder
	switch args[0] {
	case "shellenv":
		code := toolenv.Shellenv(t.Context(), withAddr, func(string) string { return "" }, http.DefaultClient, &stdout, &stderr)
		require.Equal(t, 0, code, "%s:%d: %s", page, line, stderr.String())
		assert.Contains(t, stdout.String(), base+"/v1", "%s:%d", page, line)
	case "exec":
		c, _, err := toolenv.PrepareExec(t.Context(), withAddr, func(string) string { return "" }, os.Environ(), http.DefaultClient, &stderr)
		require.NoError(t, err, "%s:%d", page, line)
		cmd := exec.Command(c.Path, c.Argv[1:]...)
		cmd.Env, cmd.Stdout, cmd.Stderr = c.Env, &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s:%d: %s", page, line, stderr.String())
		assert.Contains(t, stdout.String(), base, "%s:%d", page, line)
	}
}

// curlRequest builds the request of a curl command shown on page (flags -s, -N, -H and -d; the URL's host
// replaced by base).
func curlRequest(t *testing.T, page string, c readme.Command, base string) *http.Request {
	t.Helper()
	var url, data string
	hdr := http.Header{}
	args := c.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-H" && i+1 < len(args):
			k, v, _ := strings.Cut(args[i+1], ":")
			hdr.Set(k, strings.TrimSpace(v))
			i++
		case a == "-d" && i+1 < len(args):
			data = args[i+1]
			i++
		case strings.HasPrefix(a, "http://"):
			url = a
		case slices.Contains([]string{"-s", "-N", "-sN"}, a):
		default:
			t.Fatalf("%s:%d: curl flag %q is not understood by this test", page, c.Line, a)
		}
	}
	require.NotEmpty(t, url, "%s:%d: curl without a URL", page, c.Line)
	rest, ok := strings.CutPrefix(url, "http://127.0.0.1:8000")
	require.True(t, ok, "%s:%d: the examples talk to http://127.0.0.1:8000", page, c.Line)
	method := http.MethodGet
	var body io.Reader
	if data != "" {
		method, body = http.MethodPost, strings.NewReader(data)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+rest, body)
	require.NoError(t, err)
	req.Header = hdr
	return req
}

// answerText is the generated text of a chat or completion response, or of an Anthropic message.
func answerText(t *testing.T, body []byte) string {
	t.Helper()
	var r struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		// A Responses API response: the output_text parts of its message items.
		Object string `json:"object"`
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	if r.Object == "response" {
		var text strings.Builder
		for _, it := range r.Output {
			for _, c := range it.Content {
				if it.Type == "message" && c.Type == "output_text" {
					text.WriteString(c.Text)
				}
			}
		}
		return text.String()
	}
	if r.Type == "message" {
		var text strings.Builder
		for _, c := range r.Content {
			if c.Type == "text" {
				text.WriteString(c.Text)
			}
		}
		return text.String()
	}
	require.Len(t, r.Choices, 1, "%s", body)
	return r.Choices[0].Text + r.Choices[0].Message.Content
}
