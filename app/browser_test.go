package app

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/serve"
)

// findChromium returns a Chromium or Chrome binary: $HIGGS_CHROMIUM, else the first of the usual names on
// PATH (Debian's package installs /usr/bin/chromium).
func findChromium() string {
	if p := os.Getenv("HIGGS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestBrowserPage loads the page higgsd serves at / in headless Chromium, sends a chat prompt to the bundled
// demo model through the playground, waits for the live view's strip of that generation, and checks that the
// tokens it marks accepted, and its draft–verify rounds, are what the response's usage.speculative says. It
// saves a screenshot in the test's temp dir (and at $HIGGS_BROWSER_SCREENSHOT when set).
func TestBrowserPage(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a real browser over the demo model; skipped with -short")
	}
	bin := findChromium()
	if bin == "" {
		t.Skip("no Chromium found (install Debian's chromium package, as .ci/run does, or set HIGGS_CHROMIUM): the browser test cannot run")
	}
	root := filepath.Join("..", models.DemoTargetDir)
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: root, Draft: filepath.Join("..", models.DemoDrafterDir)}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	// A fixed block of 16, so that the strip shows speculation (the adaptive policy settles on plain decoding
	// on this tiny model, where a 16-row verify costs several decode steps).
	svc, err := serve.NewServe(serve.ServeConfig{BlockSize: 16, MaxConcurrency: 1, QueueSize: 4}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, svc.SetEngine(serve.EngineFromModels(m)))
	srv := httptest.NewServer(oaiapi.New(svc, oaiapi.Options{Log: zerolog.Nop(), Events: svc.Events()}))
	t.Cleanup(srv.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	// The first call starts the browser and must not carry a timeout (it would end the browser with it).
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")), "load the page")
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	attr := func(sel, name string) string {
		t.Helper()
		r, err := chromedp.Run(ctx, chromedp.AttributeValue(sel, name))
		require.NoError(t, err, "%s %s", sel, name)
		return r.Value
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		require.NoError(t, err, sel)
		return n
	}

	// The chat form the demo was trained on (README.md's first example).
	const prompt = "Complete this Go code:\n\n// String returns the contents of the unread portion of the buffer\n// as a string.\nfunc (b *Buffer) String() string {\n"
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(`#live-status[data-connected="1"]`),
		chromedp.SetValue(`#p-max`, "48"),
		chromedp.SetValue(`#prompt`, prompt),
		chromedp.Click(`#send`),
		chromedp.WaitVisible(`#usage[data-id]`),
	), "send a prompt from the playground")
	id := attr(`#usage`, "data-id")
	accepted, drafted, rounds := attr(`#usage`, "data-accepted"), attr(`#usage`, "data-drafted"), attr(`#usage`, "data-rounds")
	require.NotEmpty(t, id)
	gen := `.gen[data-id="` + id + `"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(gen+`[data-finish]`)), "the live strip of %s", id)
	finish := attr(gen, "data-finish")
	stripAccepted := count(gen + ` .tok[data-kind="accepted"]`)
	stripDrafted := count(gen + ` .tok[data-kind="accepted"], ` + gen + ` .tok[data-kind="rejected"], ` + gen + ` .tok[data-kind="drafted"]`)
	stripRounds := count(gen + ` .round[data-drafting="1"]`)
	stripTokens := count(gen + ` .tok`)
	output, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#history .assistant').textContent`))
	require.NoError(t, err)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)

	assert.Equal(t, "length", finish)
	assert.NotEmpty(t, output, "the playground shows the answer")
	assert.Positive(t, stripTokens)
	assert.Equal(t, accepted, strconv.Itoa(stripAccepted), "tokens marked accepted = usage.speculative.accepted_tokens")
	assert.Equal(t, drafted, strconv.Itoa(stripDrafted), "drafted tokens shown = usage.speculative.draft_tokens")
	assert.Equal(t, rounds, strconv.Itoa(stripRounds), "draft–verify rounds shown = usage.speculative.rounds")
	n, _ := strconv.Atoi(rounds)
	assert.Positive(t, n, "a fixed block of 16 drafts every round")

	// Send with an empty box (chat mode empties it after each answer) sends the example prompt the box
	// shows, and the answer joins the conversation.
	example := attr(`#prompt`, "placeholder")
	require.NotEmpty(t, example)
	box, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#prompt').value`))
	require.NoError(t, err)
	require.Empty(t, box)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(`#p-max`, "8"),
		chromedp.Click(`#send`),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#history .assistant').length === 2`),
	), "send the example prompt from an empty box")
	sent, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelectorAll('#history .user')[1].textContent`))
	require.NoError(t, err)
	assert.Equal(t, example, sent, "an empty box sends its example prompt")

	path := filepath.Join(t.TempDir(), "page.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	if extra := os.Getenv("HIGGS_BROWSER_SCREENSHOT"); extra != "" {
		require.NoError(t, os.WriteFile(extra, shot, 0o644))
	}
	t.Logf("screenshot %s (%d bytes); answer %q; accepted %s of %s drafted in %s rounds", path, len(shot), output, accepted, drafted, rounds)
}
