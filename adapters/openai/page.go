package openai

import (
	"embed"
	"io/fs"
	"net/http"
)

// web holds the page served at / and its assets: plain HTML, CSS and JavaScript compiled into the binary, so
// the page works offline and needs no build step.
//
//go:embed web
var web embed.FS

// page serves the playground and live view.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, web, "web/index.html")
}

// pageAssets serves /ui/NAME from web/NAME.
func pageAssets() http.Handler {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		// web is embedded at compile time: a missing directory is a build error, never a run-time one.
		panic("openai: embedded web assets: " + err.Error())
	}
	return http.StripPrefix("/ui/", http.FileServerFS(sub))
}
