package models

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/hub"
)

// AutoDraftName as ModelConfig.Draft picks the target's drafter from hfmodel.KnownDrafters.
const AutoDraftName = "auto"

// findTarget resolves the target as resolveTarget does and, when that finds no hub model and cfg.Pull allows
// it, downloads it first.
func findTarget(ctx context.Context, cfg ModelConfig, log zerolog.Logger) (dir, name string, err error) {
	dir, name, err = resolveTarget(cfg.Model)
	if err == nil || !cfg.Pull || !errors.Is(err, hfmodel.ErrModelNotFound) || !isHubID(cfg.Model) {
		return dir, name, err
	}
	if _, err := pullHub(ctx, cfg.Model, log); err != nil {
		return "", "", fmt.Errorf("model: %w", err)
	}
	return resolveTarget(cfg.Model)
}

// findDrafter resolves the drafter named n: the target's known drafter for "auto", else as resolveDrafter
// does, downloading a missing hub drafter when cfg.Pull allows it.
func findDrafter(ctx context.Context, cfg ModelConfig, n string, log zerolog.Logger) (string, error) {
	if n == AutoDraftName {
		return autoDrafter(ctx, cfg, log)
	}
	bundled := cfg.Model == "" && cfg.Draft == ""
	dir, err := resolveDrafter(n, bundled)
	if err == nil || bundled || !cfg.Pull || !errors.Is(err, hfmodel.ErrModelNotFound) || !isHubID(n) {
		return dir, err
	}
	if _, err := pullHub(ctx, n, log); err != nil {
		return "", fmt.Errorf("drafter: %w", err)
	}
	return resolveDrafter(n, false)
}

// autoDrafter finds the published drafter of cfg.Model (the bundled model's own when none is named): the
// first known one in the hub cache, else — with cfg.Pull — the first known one, downloaded. Without a known
// drafter, or without --pull for a missing one, the error says what to do.
func autoDrafter(ctx context.Context, cfg ModelConfig, log zerolog.Logger) (string, error) {
	if cfg.Model == "" {
		return resolveDrafter(DefaultDrafterDir, true)
	}
	pairs := hfmodel.DraftersFor(cfg.Model)
	if len(pairs) == 0 {
		known := make([]string, len(hfmodel.KnownDrafters))
		for i, p := range hfmodel.KnownDrafters {
			known[i] = p.Target
		}
		return "", fmt.Errorf("--draft auto: no known drafter for %s (known targets, in any storage format: %s); "+
			"name one with --draft DIR|ORG/NAME, or serve without one (--no-draft)", cfg.Model, strings.Join(known, ", "))
	}
	for _, p := range pairs {
		if dir, err := hfmodel.Resolve(p.Drafter); err == nil {
			log.Info().Str("target", cfg.Model).Str("drafter", p.Drafter).Str("generation", p.Generation).
				Msg("--draft auto: the target's known drafter, found in the hub cache")
			return dir, nil
		}
	}
	want := pairs[0]
	if !cfg.Pull {
		return "", fmt.Errorf("--draft auto: the drafter for %s is %s (%s), which is not in the hub cache; fetch it "+
			"with `higgsd pull %s`, or start higgsd with --pull to download it: %w",
			cfg.Model, want.Drafter, want.Generation, want.Drafter, hfmodel.ErrModelNotFound)
	}
	log.Info().Str("target", cfg.Model).Str("drafter", want.Drafter).Str("generation", want.Generation).
		Msg("--draft auto: downloading the target's known drafter (--pull)")
	dir, err := pullHub(ctx, want.Drafter, log)
	if err != nil {
		return "", fmt.Errorf("--draft auto: %w", err)
	}
	return dir, nil
}

// isHubID reports whether arg names a hub model rather than a directory.
func isHubID(arg string) bool {
	_, err := hfmodel.ParseHubID(arg)
	return err == nil
}

// pullHub downloads a hub model into the hub cache (adapters/hub, configured from the environment as the
// Hugging Face tools are), logging each file, and returns its snapshot directory.
func pullHub(ctx context.Context, arg string, log zerolog.Logger) (string, error) {
	id, err := hfmodel.ParseHubID(arg)
	if err != nil {
		return "", err
	}
	c, err := hub.FromEnv(os.Getenv)
	if err != nil {
		return "", err
	}
	c.Progress = func(ev hub.Event) {
		if ev.Finished {
			log.Info().Str("repo", ev.Repo).Str("file", ev.File).Int64("bytes", ev.Size).Bool("cached", ev.Cached).Msg("pulled")
		}
	}
	log.Info().Str("model", arg).Str("endpoint", c.Endpoint).Str("cache", c.Cache).Msg("--pull: fetching a model missing from the hub cache")
	res, err := c.Pull(ctx, id, hub.Options{})
	if err != nil {
		return "", err
	}
	log.Info().Str("model", arg).Str("dir", res.Dir).Int64("downloaded_bytes", res.Fetched).Msg("--pull: model in the hub cache")
	return res.Dir, nil
}
