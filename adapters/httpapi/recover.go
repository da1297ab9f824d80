package httpapi

import (
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// Recover turns a panic in next into a logged error and, unless the response has begun, calls answer with
// the request's writer to send the API's own 500, so that no panic reaches a client as a dropped
// connection. http.ErrAbortHandler, the deliberate abort, is re-raised for net/http.
func Recover(log zerolog.Logger, next http.Handler, answer func(w http.ResponseWriter)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := &beganWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Str("path", r.URL.Path).
				Msg("handler panicked")
			if !bw.began {
				answer(bw)
			}
		}()
		next.ServeHTTP(bw, r)
	})
}

// beganWriter notes whether the response has begun; Unwrap keeps Flush, deadlines and the statusWriter
// beneath it (MarkStatus) reachable.
type beganWriter struct {
	http.ResponseWriter
	began bool
}

func (w *beganWriter) WriteHeader(code int) { w.began = true; w.ResponseWriter.WriteHeader(code) }

func (w *beganWriter) Write(b []byte) (int, error) {
	w.began = true
	return w.ResponseWriter.Write(b)
}

func (w *beganWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
