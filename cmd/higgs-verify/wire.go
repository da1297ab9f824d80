//go:build wireinject

package main

import (
	"context"

	"github.com/google/wire"
	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/app"
)

// initModels loads the models named by cfg; the cleanup closes them.
func initModels(ctx context.Context, cfg app.ModelConfig, log zerolog.Logger) (*app.Models, func(), error) {
	wire.Build(app.ProvideModels)
	return nil, nil, nil
}
