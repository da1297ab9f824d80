package app

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/higgs-go/higgs/adapters/hub"
)

// PullProgress renders a pull's events on w: one progress bar per file on a terminal, plain lines otherwise
// (one when a file starts, one when it is verified and in place, one for a file the cache already held).
func PullProgress(w io.Writer, terminal bool) func(hub.Event) {
	if terminal {
		return barProgress(w)
	}
	started := map[string]bool{}
	return func(ev hub.Event) {
		key := ev.Repo + "/" + ev.File
		switch {
		case ev.Cached && ev.Finished && !started[key]:
			fmt.Fprintf(w, "%s: %s (%s) already in the cache\n", ev.Repo, ev.File, FormatByteSize(ev.Size))
		case ev.Finished:
			fmt.Fprintf(w, "%s: %s (%s) done\n", ev.Repo, ev.File, FormatByteSize(ev.Size))
		case !started[key]:
			started[key] = true
			from := ""
			if ev.Done > 0 {
				from = ", resuming at " + FormatByteSize(ev.Done)
			}
			fmt.Fprintf(w, "%s: %s (%s) fetching%s\n", ev.Repo, ev.File, FormatByteSize(ev.Size), from)
		}
	}
}

// barProgress draws one byte-counting bar per file as it downloads.
func barProgress(w io.Writer) func(hub.Event) {
	var bar *progressbar.ProgressBar
	cur := ""
	return func(ev hub.Event) {
		key := ev.Repo + "/" + ev.File
		if ev.Cached && ev.Finished && cur != key {
			fmt.Fprintf(w, "%s (%s) already in the cache\n", key, FormatByteSize(ev.Size))
			return
		}
		if cur != key {
			cur = key
			bar = progressbar.NewOptions64(ev.Size, progressbar.OptionSetWriter(w), progressbar.OptionShowBytes(true),
				progressbar.OptionSetDescription(key), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionShowCount(), progressbar.OptionUseIECUnits(true), progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
		}
		_ = bar.Set64(ev.Done)
		if ev.Finished {
			_ = bar.Finish()
			cur = ""
		}
	}
}
