// Package hubtest is test support: a local hub that speaks the download protocol adapters/hub uses (model
// info, resolve with a redirect to a separate storage server for LFS files, ranges, etags, gated
// repositories), with faults to inject (a dropped connection mid-file, corrupted bytes). Only tests import
// it; it never touches the network beyond loopback.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// LFSThreshold is the size from which a file is stored as an LFS file (its bytes served by the storage
// server, its sha256 listed), unless it is a .safetensors file, which always is.
const LFSThreshold = 10 << 10

// Server is a hub (Hub) and its file storage (CDN), both on loopback.
type Server struct {
	Hub, CDN *httptest.Server
	// Token, when set, is the bearer token gated repositories require.
	Token string
	// IgnoreRange makes the storage server answer every request with the whole file (200), as a server
	// without range support does.
	IgnoreRange bool

	mu       sync.Mutex
	repos    map[string]*repo
	blobs    map[string][]byte // sha256 → bytes, served by the CDN
	drop     map[string]int    // file name → bytes after which the next CDN answer is cut
	corrupt  map[string]bool   // sha256 → serve altered bytes
	requests []string          // "METHOD path" of every request, both servers
}

type repo struct {
	commit string
	refs   map[string]string
	files  map[string][]byte
	gated  bool
}

// New starts the servers; they stop when the test ends.
func New(t testing.TB) *Server {
	s := &Server{repos: map[string]*repo{}, blobs: map[string][]byte{}, drop: map[string]int{}, corrupt: map[string]bool{}}
	s.Hub = httptest.NewServer(http.HandlerFunc(s.hub))
	s.CDN = httptest.NewServer(http.HandlerFunc(s.cdn))
	t.Cleanup(s.Hub.Close)
	t.Cleanup(s.CDN.Close)
	return s
}

// URL is the hub's endpoint (HF_ENDPOINT).
func (s *Server) URL() string { return s.Hub.URL }

// Add publishes a repository ORG/NAME whose main branch holds files; it returns the commit id (derived from
// the contents).
func (s *Server) Add(id string, files map[string][]byte) string {
	h := sha1.New()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	commit := hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[id] = &repo{commit: commit, refs: map[string]string{"main": commit}, files: files}
	for n, b := range files {
		if lfs(n, b) {
			s.blobs[sha256Hex(b)] = b
		}
	}
	return commit
}

// AddDir publishes a repository holding the regular files at the top of dir.
func (s *Server) AddDir(t testing.TB, id, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return s.Add(id, files)
}

// Gate makes a repository answer 401 to requests without Token.
func (s *Server) Gate(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[id].gated = true
}

// DropAfter cuts the storage server's next answer for file (a base name) after n bytes.
func (s *Server) DropAfter(file string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop[file] = n
}

// Corrupt makes the storage server send altered bytes for a repository's LFS file (the hub still lists the
// true sha256).
func (s *Server) Corrupt(id, file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corrupt[sha256Hex(s.repos[id].files[file])] = true
}

// Requests returns the requests both servers received, as "METHOD PATH" (with a Range, " RANGE" appended).
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *Server) log(r *http.Request) {
	line := r.Method + " " + r.URL.Path
	if rg := r.Header.Get("Range"); rg != "" {
		line += " " + rg
	}
	s.mu.Lock()
	s.requests = append(s.requests, line)
	s.mu.Unlock()
}

func lfs(name string, b []byte) bool {
	return strings.HasSuffix(name, ".safetensors") || len(b) >= LFSThreshold
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// gitOID is a file's git blob id, the etag the hub gives a file kept in git.
func gitOID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func hubError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Error-Message", msg)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// hub answers /api/models/ORG/NAME/revision/REV and /ORG/NAME/resolve/REV/FILE.
func (s *Server) hub(w http.ResponseWriter, r *http.Request) {
	s.log(r)
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/api/models/"); ok {
		parts := strings.SplitN(rest, "/", 4)
		if len(parts) != 4 || parts[2] != "revision" {
			hubError(w, http.StatusNotFound, "no such route")
			return
		}
		rp, commit, ok := s.lookup(w, r, parts[0]+"/"+parts[1], parts[3])
		if !ok {
			return
		}
		type lfsInfo struct {
			SHA256 string `json:"sha256"`
			Size   int    `json:"size"`
		}
		type sib struct {
			Name string   `json:"rfilename"`
			Size int      `json:"size"`
			LFS  *lfsInfo `json:"lfs,omitempty"`
		}
		info := struct {
			ID       string `json:"id"`
			SHA      string `json:"sha"`
			Siblings []sib  `json:"siblings"`
		}{ID: parts[0] + "/" + parts[1], SHA: commit}
		names := make([]string, 0, len(rp.files))
		for n := range rp.files {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			b := rp.files[n]
			e := sib{Name: n, Size: len(b)}
			if lfs(n, b) {
				e.LFS = &lfsInfo{SHA256: sha256Hex(b), Size: len(b)}
			}
			info.Siblings = append(info.Siblings, e)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" {
		hubError(w, http.StatusNotFound, "no such route")
		return
	}
	rp, commit, ok := s.lookup(w, r, parts[0]+"/"+parts[1], parts[3])
	if !ok {
		return
	}
	b, found := rp.files[parts[4]]
	if !found {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		hubError(w, http.StatusNotFound, "entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if lfs(parts[4], b) {
		sum := sha256Hex(b)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(b)))
		w.Header().Set("ETag", `W/"`+gitOID([]byte(sum))+`"`)
		// The storage is another host (localhost, not 127.0.0.1), as the hub's is: no token goes there.
		cdn := strings.Replace(s.CDN.URL, "127.0.0.1", "localhost", 1)
		http.Redirect(w, r, cdn+"/blobs/"+sum+"/"+filepath.Base(parts[4]), http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitOID(b)+`"`)
	http.ServeContent(w, r, parts[4], time.Time{}, bytes.NewReader(b))
}

// lookup finds a repository and a revision's commit, answering 404 or 401 itself.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id, rev string) (*repo, string, bool) {
	s.mu.Lock()
	rp := s.repos[id]
	s.mu.Unlock()
	if rp == nil {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		hubError(w, http.StatusUnauthorized, "Repository not found") // as the hub answers an unknown id without a token
		return nil, "", false
	}
	if rp.gated && (s.Token == "" || r.Header.Get("Authorization") != "Bearer "+s.Token) {
		w.Header().Set("X-Error-Code", "GatedRepo")
		hubError(w, http.StatusUnauthorized, "Access to model "+id+" is restricted")
		return nil, "", false
	}
	commit := rp.refs[rev]
	if commit == "" && rev == rp.commit {
		commit = rev
	}
	if commit == "" {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		hubError(w, http.StatusNotFound, "Revision Not Found for url")
		return nil, "", false
	}
	return rp, commit, true
}

// cdn serves /blobs/SHA256/NAME with ranges, applying the faults asked for.
func (s *Server) cdn(w http.ResponseWriter, r *http.Request) {
	s.log(r)
	if r.Header.Get("Authorization") != "" {
		http.Error(w, "a token was sent to the storage server", http.StatusBadRequest)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/blobs/"), "/")
	s.mu.Lock()
	b, ok := s.blobs[parts[0]]
	bad := s.corrupt[parts[0]]
	if s.IgnoreRange {
		r.Header.Del("Range")
	}
	cut, drop := 0, false
	if len(parts) == 2 {
		cut, drop = s.drop[parts[1]]
		delete(s.drop, parts[1])
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if bad {
		b = slices.Clone(b)
		b[len(b)/2] ^= 0xff
	}
	if !drop {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
		return
	}
	// Announce the whole answer, send cut bytes of it, and close the connection.
	start := 0
	if rg := r.Header.Get("Range"); rg != "" {
		_, _ = fmt.Sscanf(rg, "bytes=%d-", &start)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	status := "200 OK"
	if start > 0 {
		status = "206 Partial Content"
	}
	fmt.Fprintf(buf, "HTTP/1.1 %s\r\nContent-Length: %d\r\n", status, len(b)-start)
	if start > 0 {
		fmt.Fprintf(buf, "Content-Range: bytes %d-%d/%d\r\n", start, len(b)-1, len(b))
	}
	fmt.Fprintf(buf, "\r\n")
	end := min(start+cut, len(b))
	_, _ = buf.Write(b[start:end])
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}
