// Command higgsd serves local LLMs over an OpenAI-compatible HTTP API with DFlash speculative decoding.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/app"
)

func main() {
	cfg := app.ModelConfig{}
	flag.StringVar(&cfg.Model, "model", "", "target model directory or Hugging Face id")
	flag.StringVar(&cfg.Draft, "draft", "", "DFlash drafter directory")
	flag.StringVar(&cfg.Backend, "backend", "cpu", "cpu|mlx|auto")
	flag.Parse()
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	if _, err := initTarget(cfg); err != nil {
		log.Error().Err(err).Msg("higgsd cannot start")
		fmt.Fprintln(os.Stderr, "higgsd:", err)
		os.Exit(1)
	}
}
