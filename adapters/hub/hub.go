// Package hub fetches model repositories from a Hugging Face hub into the standard hub cache, the layout
// adapters/hfmodel.Resolve reads: models--ORG--NAME/blobs/<etag> (the files' bytes), snapshots/<commit>/<file>
// (relative symbolic links to the blobs) and refs/<revision> (the commit a branch or tag named).
//
// It speaks the hub's download protocol: the model info API (GET /api/models/ORG/NAME/revision/REV?blobs=true,
// whose siblings list every file with its size and, for LFS files, the sha256), then per file a HEAD of
// /ORG/NAME/resolve/COMMIT/FILE (X-Repo-Commit, X-Linked-Etag or ETag, X-Linked-Size, and a redirect to the
// storage the bytes come from, which is not followed: its headers are the file's) and a GET of where it points,
// resumed with Range from the blob's .incomplete file. LFS files are checked against their sha256; a mismatch
// deletes the blob. HF_TOKEN (or the token file the Hugging Face tools write) is sent as a bearer token to the
// hub; Go's client drops it on a redirect to another host.
//
// Offline first: a complete snapshot already in the cache, or HF_HUB_OFFLINE, answers without the network.
// Nothing here runs unless asked: higgsd downloads only under `higgsd pull` or --pull.
package hub

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/higgs-go/higgs/adapters/hfmodel"
)

// DefaultEndpoint is the hub used when HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// Errors a pull wraps, for callers that tell them apart.
var (
	// ErrUnreachable: the hub did not answer (no network, a refused connection, a name that does not resolve).
	ErrUnreachable = errors.New("hub unreachable")
	// ErrOffline: HF_HUB_OFFLINE is set and the cache does not hold the model.
	ErrOffline = errors.New("offline and not in the cache")
	// ErrUnauthorized: the hub refused the request (401 or 403): a gated or private repository without a
	// token, or with one that has no access.
	ErrUnauthorized = errors.New("hub refused access")
	// ErrNotFound: no such repository, revision or file (404).
	ErrNotFound = errors.New("not found on the hub")
	// ErrChecksum: a downloaded file's sha256 (or size) is not the one the hub lists; its blob was deleted.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrProtocol: the hub answered something this client does not understand.
	ErrProtocol = errors.New("unexpected hub answer")
)

// Client fetches repositories from one hub into one cache. The zero value is not usable: build it with
// FromEnv or fill Endpoint, Cache and HTTP.
type Client struct {
	// Endpoint is the hub's base URL, without a trailing slash.
	Endpoint string
	// Token, when set, is sent to the hub as a bearer token.
	Token string
	// Cache is the hub cache root downloads go to.
	Cache string
	// Offline forbids the network: only the cache answers.
	Offline bool
	// HTTP makes the requests (its redirect policy is replaced per request).
	HTTP *http.Client
	// Progress, when set, is told about every file (see Event).
	Progress func(Event)
	// Attempts is how many times a file's download is tried, each resuming where the last stopped (0: 5).
	Attempts int
	// Backoff is the wait before the second attempt, doubled for each later one (0: none).
	Backoff time.Duration
}

// Event reports a file's progress: a first event with Done 0 (or the resumed size), more as bytes arrive, and
// one with Finished once it is verified and linked. Cached marks a file the cache already held (one event).
type Event struct {
	Repo     string
	File     string
	Done     int64
	Size     int64
	Finished bool
	Cached   bool
}

// FromEnv builds a client from the environment as the Hugging Face tools read it: HF_ENDPOINT (default
// DefaultEndpoint), HF_TOKEN, else the token file (HF_TOKEN_PATH, else $HF_HOME/token, else
// ~/.cache/huggingface/token), HF_HUB_OFFLINE (1, true, yes or on) and the cache root
// (hfmodel.HubCache: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub).
func FromEnv(getenv func(string) string) (*Client, error) {
	cache, err := hfmodel.HubCache()
	if err != nil {
		return nil, err
	}
	endpoint := strings.TrimRight(getenv("HF_ENDPOINT"), "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, fmt.Errorf("HF_ENDPOINT %q: want an http:// or https:// URL", endpoint)
	}
	token := strings.TrimSpace(getenv("HF_TOKEN"))
	if token == "" {
		token = readTokenFile(getenv)
	}
	return &Client{Endpoint: endpoint, Token: token, Cache: cache, Offline: truthy(getenv("HF_HUB_OFFLINE")),
		HTTP: &http.Client{}, Backoff: time.Second}, nil
}

// readTokenFile reads the token the Hugging Face tools' login stores ("" when there is none).
func readTokenFile(getenv func(string) string) string {
	path := getenv("HF_TOKEN_PATH")
	if path == "" {
		if h := getenv("HF_HOME"); h != "" {
			path = filepath.Join(h, "token")
		} else if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, ".cache", "huggingface", "token")
		}
	}
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// truthy is how the Hugging Face tools read a boolean variable.
func truthy(v string) bool {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}
