package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/higgs-go/higgs/adapters/hfmodel"
)

// fetchFile makes one repository file's blob present and returns its path ("" when the snapshot already
// links the file, with the listed size) and the bytes downloaded. A blob already present (another revision
// shares it) is not downloaded again. Linking is the caller's, once every blob is there, so that a failed
// pull leaves no partial snapshot for hfmodel.Resolve to find.
func (c *Client) fetchFile(ctx context.Context, id hfmodel.HubID, repo, commit string, f sibling) (string, int64, error) {
	want := int64(-1)
	if f.Size != nil {
		want = *f.Size
	}
	sha := ""
	if f.LFS != nil {
		want, sha = f.LFS.Size, f.LFS.SHA256
	}
	ev := Event{Repo: id.Repo(), File: f.Name, Size: want}
	dst := filepath.Join(snapshotDir(repo, commit), filepath.FromSlash(f.Name))
	if st, err := os.Stat(dst); err == nil && st.Mode().IsRegular() && (want < 0 || st.Size() == want) {
		ev.Done, ev.Size, ev.Finished, ev.Cached = st.Size(), st.Size(), true, true
		c.report(ev)
		return "", 0, nil
	}
	meta, err := c.head(ctx, id, commit, f.Name)
	if err != nil {
		return "", 0, err
	}
	if meta.size >= 0 && want >= 0 && meta.size != want {
		return "", 0, fmt.Errorf("%w: %s: the hub lists %d bytes but serves %d", ErrProtocol, f.Name, want, meta.size)
	}
	if want < 0 {
		want = meta.size
		ev.Size = want
	}
	blob := blobPath(repo, meta.etag)
	var fetched int64
	if st, err := os.Stat(blob); err == nil && st.Mode().IsRegular() && (want < 0 || st.Size() == want) {
		ev.Done, ev.Cached = st.Size(), true
	} else {
		if fetched, err = c.download(ctx, ev, meta.where, blob, want, sha); err != nil {
			return "", fetched, err
		}
		ev.Done = want
	}
	ev.Finished = true
	c.report(ev)
	return blob, fetched, nil
}

// download fetches a blob through its .incomplete file, resuming from what an earlier attempt (or an
// earlier pull) left there, up to c.Attempts times; then it checks the size and, for an LFS file, the
// sha256, deleting the partial file on a mismatch, and moves it into place.
func (c *Client) download(ctx context.Context, ev Event, where, blob string, size int64, sha string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	part := blob + ".incomplete"
	attempts := c.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	wait := c.Backoff
	var fetched int64
	var err error
	for a := 0; a < attempts; a++ {
		if a > 0 {
			select {
			case <-ctx.Done():
				return fetched, ctx.Err()
			case <-time.After(wait):
			}
			wait *= 2
		}
		var n int64
		n, err = c.fetchOnce(ctx, ev, where, part, size)
		fetched += n
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fetched, err
	}
	if err := verify(part, ev.File, size, sha); err != nil {
		_ = os.Remove(part)
		return fetched, err
	}
	if err := os.Rename(part, blob); err != nil {
		return fetched, fmt.Errorf("hub cache: %w", err)
	}
	return fetched, nil
}

// fetchOnce appends to part what the server sends after its current length (a Range request when it holds
// some) and returns the bytes received.
func (c *Client) fetchOnce(ctx context.Context, ev Event, where, part string, size int64) (int64, error) {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	have := st.Size()
	if size >= 0 && have > size {
		have = 0 // longer than the file: not a prefix of it
	}
	if size >= 0 && have == size {
		return 0, nil
	}
	hdr := map[string]string{"Accept-Encoding": "identity"}
	if have > 0 {
		hdr["Range"] = "bytes=" + strconv.FormatInt(have, 10) + "-"
	}
	resp, err := c.do(ctx, http.MethodGet, where, hdr, true)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, err := rangeStart(resp.Header.Get("Content-Range"))
		if err != nil || start != have {
			return 0, fmt.Errorf("%w: %s: asked for bytes from %d, got Content-Range %q", ErrProtocol, ev.File, have,
				resp.Header.Get("Content-Range"))
		}
	case http.StatusOK:
		have = 0 // the whole file again
	case http.StatusRequestedRangeNotSatisfiable:
		// What is there is not a prefix the server recognises: start over on the next attempt.
		_ = f.Truncate(0)
		return 0, fmt.Errorf("%w: %s: range from %d refused; starting over", ErrProtocol, ev.File, have)
	default:
		return 0, statusError(resp, ev.Repo+": "+ev.File)
	}
	if err := f.Truncate(have); err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return 0, fmt.Errorf("hub cache: %w", err)
	}
	ev.Done = have
	c.report(ev)
	pw := &progressWriter{w: f, ev: ev, report: c.report}
	var body io.Reader = resp.Body
	if size >= 0 {
		// One byte past the listed size tells a server that sends more, without filling the disk first.
		body = io.LimitReader(resp.Body, size-have+1)
	}
	n, err := io.Copy(pw, body)
	if err == nil && size >= 0 && have+n > size {
		_ = f.Truncate(0) // not the listed file: the next attempt starts over
		return n, fmt.Errorf("%w: %s: the server sent more than the %d bytes the hub lists", ErrProtocol, ev.File, size)
	}
	if err != nil {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		return n, fmt.Errorf("%s: the download stopped at %d of %d bytes (%w); pulling again resumes it",
			ev.File, have+n, size, err)
	}
	if size >= 0 && have+n != size {
		return n, fmt.Errorf("%s: the download stopped at %d of %d bytes; pulling again resumes it", ev.File, have+n, size)
	}
	return n, nil
}

// rangeStart reads the first byte of a Content-Range "bytes START-END/TOTAL".
func rangeStart(cr string) (int64, error) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, errors.New("not a byte range")
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok || start == "" || strings.Trim(start, "0123456789") != "" {
		return 0, errors.New("not a byte range")
	}
	return strconv.ParseInt(start, 10, 64)
}

// verify checks a downloaded file's size and, when the hub lists one, its sha256.
func verify(p, file string, size int64, sha string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if size >= 0 && n != size {
		return fmt.Errorf("%w: %s is %d bytes, the hub lists %d; the download was deleted, pull again", ErrChecksum, file, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); sha != "" && got != sha {
		return fmt.Errorf("%w: %s has sha256 %s, the hub lists %s; the download was deleted, pull again", ErrChecksum, file, got, sha)
	}
	return nil
}

// report tells the progress callback, if any.
func (c *Client) report(ev Event) {
	if c.Progress != nil {
		c.Progress(ev)
	}
}

// progressWriter reports each write's new total.
type progressWriter struct {
	w      io.Writer
	ev     Event
	report func(Event)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.ev.Done += int64(n)
	p.report(p.ev)
	return n, err
}
