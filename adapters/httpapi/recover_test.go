package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecover(t *testing.T) {
	for _, c := range []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		wantBody   string
		logged     bool
	}{
		{"no panic", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }, http.StatusOK, "ok", false},
		{"panic before the answer", func(http.ResponseWriter, *http.Request) { panic("boom") },
			http.StatusInternalServerError, "answered", true},
		{"panic after the header", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			panic("boom")
		}, http.StatusAccepted, "", true},
		{"panic mid-body", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("part"))
			panic("boom")
		}, http.StatusOK, "part", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := Recover(zerolog.New(&logs), c.handler, func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte("answered"))
			})
			rec := httptest.NewRecorder()
			require.NotPanics(t, func() { h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil)) })
			assert.Equal(t, c.wantStatus, rec.Code)
			assert.Equal(t, c.wantBody, rec.Body.String())
			if c.logged {
				assert.Contains(t, logs.String(), `"panic":"boom"`)
				assert.Contains(t, logs.String(), `"path":"/x"`)
			} else {
				assert.Empty(t, logs.String())
			}
		})
	}
}

// http.ErrAbortHandler is the deliberate way to abort a response: it goes on to net/http, unanswered.
func TestRecoverAbort(t *testing.T) {
	answered := false
	h := Recover(zerolog.Nop(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }),
		func(http.ResponseWriter) { answered = true })
	assert.PanicsWithValue(t, http.ErrAbortHandler, func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	})
	assert.False(t, answered)
}
