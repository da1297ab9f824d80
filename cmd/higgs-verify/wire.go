//go:build wireinject

package main

import (
	"github.com/google/wire"
	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/ports"
)

func initTarget(cfg app.ModelConfig) (ports.Target, error) {
	wire.Build(app.ProvideTarget)
	return nil, nil
}
