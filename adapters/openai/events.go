package openai

import (
	"net/http"
	"time"

	"github.com/higgs-go/higgs/adapters/httpapi"
)

// eventsKeepAlive is how often an idle event stream gets a comment line, so that proxies and browsers do not
// time it out.
const eventsKeepAlive = 15 * time.Second

// events streams the generations the caller may watch as server-sent events (`data: <ports.Event JSON>`), until
// the client leaves or the server drains: its own tenant's, or every tenant's for the operator key. The schema
// is documented in docs/http-api.md.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.opts.Events == nil {
		writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "this server has no event stream"})
		return
	}
	ch, cancel := s.opts.Events.Subscribe(httpapi.IdentityOf(r.Context()).EventScope())
	defer cancel()
	sse := httpapi.StartSSE(w)
	tick := time.NewTicker(eventsKeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.host.Draining():
			return
		case <-tick.C:
			if sse.Comment("keep-alive") != nil {
				return
			}
		case ev, ok := <-ch:
			if !ok || sse.Event(ev) != nil {
				return
			}
		}
	}
}
