//go:build wireinject

package main

import (
	"github.com/google/wire"
	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/app"
)

func initServer(cfg app.Config, log zerolog.Logger) (*app.Server, error) {
	wire.Build(app.ServeSet)
	return nil, nil
}
