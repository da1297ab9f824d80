package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/higgs-go/higgs/adapters/hfmodel"
)

// maxInfoBytes bounds the model info answer: a repository of thousands of files stays well under it.
const maxInfoBytes = 16 << 20

// commitRE is a git commit id as the hub gives it; sha256RE an LFS file's sha256.
var (
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// sibling is one file of the model info answer.
type sibling struct {
	Name string `json:"rfilename"`
	Size *int64 `json:"size"`
	LFS  *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// repoInfo is the part of the model info answer a pull reads.
type repoInfo struct {
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

// parseInfo decodes and checks a model info answer: a commit id, and file names that may become paths.
func parseInfo(body []byte) (repoInfo, error) {
	var info repoInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return repoInfo{}, fmt.Errorf("%w: model info: %w", ErrProtocol, err)
	}
	if !commitRE.MatchString(info.SHA) {
		return repoInfo{}, fmt.Errorf("%w: model info: sha %q is not a commit id", ErrProtocol, info.SHA)
	}
	for _, s := range info.Siblings {
		if !safeName(s.Name) {
			return repoInfo{}, fmt.Errorf("%w: model info: file name %q is not a relative path", ErrProtocol, s.Name)
		}
		if s.LFS != nil && !sha256RE.MatchString(s.LFS.SHA256) {
			return repoInfo{}, fmt.Errorf("%w: model info: %s: lfs sha256 %q is not a sha256", ErrProtocol, s.Name, s.LFS.SHA256)
		}
	}
	return info, nil
}

// info asks the model info API for a revision's commit and files.
func (c *Client) info(ctx context.Context, id hfmodel.HubID) (repoInfo, error) {
	u := fmt.Sprintf("%s/api/models/%s/%s/revision/%s?blobs=true", c.Endpoint, url.PathEscape(id.Org),
		url.PathEscape(id.Name), url.PathEscape(id.Rev()))
	resp, err := c.do(ctx, http.MethodGet, u, nil, true)
	if err != nil {
		return repoInfo{}, err
	}
	defer resp.Body.Close()
	if err := statusError(resp, id.String()); err != nil {
		return repoInfo{}, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoBytes+1))
	if err != nil {
		return repoInfo{}, c.netError(err)
	}
	if len(body) > maxInfoBytes {
		return repoInfo{}, fmt.Errorf("%w: model info of %s is larger than %d bytes", ErrProtocol, id.Repo(), maxInfoBytes)
	}
	return parseInfo(body)
}

// fileMeta is what the resolve HEAD tells about a file.
type fileMeta struct {
	commit string
	etag   string
	size   int64 // -1 when not given
	where  string
}

// head asks for a file's metadata at a commit: the redirect to the storage is not followed (its headers are
// the file's: X-Linked-Etag, X-Linked-Size), a redirect within the hub (a renamed repository) is.
func (c *Client) head(ctx context.Context, id hfmodel.HubID, commit, file string) (fileMeta, error) {
	u := c.resolveURL(id, commit, file)
	resp, err := c.do(ctx, http.MethodHead, u, map[string]string{"Accept-Encoding": "identity"}, false)
	if err != nil {
		return fileMeta{}, err
	}
	resp.Body.Close()
	if resp.StatusCode < 300 || resp.StatusCode >= 400 {
		if err := statusError(resp, id.String()+": "+file); err != nil {
			return fileMeta{}, err
		}
	}
	m := fileMeta{commit: resp.Header.Get("X-Repo-Commit"), size: -1, where: resp.Request.URL.String()}
	m.etag = normalizeEtag(resp.Header.Get("X-Linked-Etag"))
	if m.etag == "" {
		m.etag = normalizeEtag(resp.Header.Get("ETag"))
	}
	sizeHdr := resp.Header.Get("X-Linked-Size")
	if sizeHdr == "" && resp.StatusCode < 300 {
		sizeHdr = resp.Header.Get("Content-Length")
	}
	if sizeHdr != "" {
		n, err := strconv.ParseInt(sizeHdr, 10, 64)
		if err != nil || n < 0 {
			return fileMeta{}, fmt.Errorf("%w: %s: size %q", ErrProtocol, file, sizeHdr)
		}
		m.size = n
	}
	if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && loc != "" {
		next, err := resp.Request.URL.Parse(loc)
		if err != nil {
			return fileMeta{}, fmt.Errorf("%w: %s: redirect to %q: %w", ErrProtocol, file, loc, err)
		}
		m.where = next.String()
	}
	if !safeToken(m.etag) {
		return fileMeta{}, fmt.Errorf("%w: %s: etag %q cannot name a blob", ErrProtocol, file, m.etag)
	}
	if m.commit != "" && m.commit != commit {
		return fileMeta{}, fmt.Errorf("%w: %s: the hub served commit %s, not %s", ErrProtocol, file, m.commit, commit)
	}
	return m, nil
}

// resolveURL is where a file of a commit is served.
func (c *Client) resolveURL(id hfmodel.HubID, commit, file string) string {
	parts := strings.Split(file, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return fmt.Sprintf("%s/%s/%s/resolve/%s/%s", c.Endpoint, url.PathEscape(id.Org), url.PathEscape(id.Name),
		commit, strings.Join(parts, "/"))
}

// do sends one request with the token (to the hub only) and the redirect policy: all redirects followed, or
// (follow false) only those within the same host.
func (c *Client) do(ctx context.Context, method, u string, hdr map[string]string, follow bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrProtocol, u, err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c.Token != "" && strings.HasPrefix(u, c.Endpoint+"/") {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := *c.HTTP
	hc.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("%w: more than 10 redirects", ErrProtocol)
		}
		if !follow && r.URL.Host != via[0].URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, c.netError(err)
	}
	return resp, nil
}

// netError explains a failed exchange: a cancelled context as itself, anything else as the hub being out of
// reach, with what to do without it.
func (c *Client) netError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrProtocol) {
		return err
	}
	return fmt.Errorf("%w: cannot reach the hub at %s (%w); set HF_HUB_OFFLINE=1 to use only the local cache, "+
		"or pass a local model directory to --model", ErrUnreachable, c.Endpoint, err)
}

// statusError maps a non-success answer to a clear error (nil for 2xx), with the hub's own message when it
// gives one.
func statusError(resp *http.Response, what string) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" && resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			msg = e.Error
		}
	}
	if msg != "" {
		msg = " (the hub says: " + msg + ")"
	}
	code := resp.Header.Get("X-Error-Code")
	switch {
	case code == "RepoNotFound":
		return fmt.Errorf("%w: %s: %s%s; no such repository — or a private one: check the id, and set HF_TOKEN "+
			"to a token with access if it is private", ErrNotFound, what, resp.Status, msg)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %s: %s%s; the repository is gated or private: accept its terms on the hub and set "+
			"HF_TOKEN to a token with access", ErrUnauthorized, what, resp.Status, msg)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s: %s%s; check the id and the revision", ErrNotFound, what, resp.Status, msg)
	}
	return fmt.Errorf("%w: %s: %s%s", ErrProtocol, what, resp.Status, msg)
}

// normalizeEtag strips a weak marker and quotes: W/"abc" → abc.
func normalizeEtag(e string) string {
	e = strings.TrimPrefix(strings.TrimSpace(e), "W/")
	return strings.Trim(e, `"`)
}
