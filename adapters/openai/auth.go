package openai

import (
	"errors"
	"net/http"
	"strings"

	"github.com/higgs-go/higgs/adapters/httpapi"
)

// authenticate guards the /v1/ routes with the keys, checked before the body is read, and hands the handlers
// the caller's identity (httpapi.IdentityOf): its tenant, and whether it is the operator. An API mounted
// beside this one on the same httpapi.Server authenticates its own routes its own way.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if !s.opts.Keys.Required() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			id, ok := s.opts.Keys.Identify(httpapi.BearerToken(r.Header.Get("Authorization")))
			if !ok {
				httpapi.RefuseUnread(w, r)
				w.Header().Set("WWW-Authenticate", `Bearer realm="higgs"`)
				writeError(w, &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error",
					Code: "invalid_api_key", Message: "missing or incorrect API key: send Authorization: Bearer <key>"})
				return
			}
			r = r.WithContext(httpapi.WithIdentity(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads the body within the configured size and time limits; a failure other than those two
// (which ErrorFor maps to 413 and 408) is the client's broken body, a 400.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := httpapi.ReadBody(w, r, s.opts.MaxBodyBytes, s.opts.BodyTimeout)
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &mbe) && !errors.Is(err, httpapi.ErrBodyTimeout) {
		return nil, badRequest("", "could not read the request body: %v", err)
	}
	return body, err
}
