package responses

import (
	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/ports"
)

// Server is the Responses API over an openai.Server's generator, options and host.
type Server struct {
	api     *openai.Server
	gen     ports.Generator
	opts    openai.Options
	log     zerolog.Logger
	metrics *httpapi.Metrics
}

// New registers POST /v1/responses beside api's routes, behind the same guards (auth, tenancy, the JSON
// body and Host checks, the drain); its 405 is api's.
func New(api *openai.Server) *Server {
	opts := api.Options()
	s := &Server{api: api, gen: api.Generator(), opts: opts, log: opts.Log, metrics: api.Metrics()}
	api.Work("POST /v1/responses", s.responses)
	return s
}
