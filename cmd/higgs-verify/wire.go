//go:build wireinject

package main

import (
	"context"

	"github.com/google/wire"
	"github.com/higgs-go/higgs/app/models"
	"github.com/rs/zerolog"
)

// initModels loads the models named by cfg; the cleanup closes them.
func initModels(ctx context.Context, cfg models.ModelConfig, log zerolog.Logger) (*models.Models, func(), error) {
	wire.Build(models.ProvideModels)
	return nil, nil, nil
}
