package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/hub"
)

// PullConfig is `higgsd pull`'s command line: the hub ids to fetch and how.
type PullConfig struct {
	// IDs are ORG/NAME[@REVISION] ids.
	IDs []string
	// Include replaces hub.DefaultInclude when set (--include, repeatable).
	Include []string
	// Quiet drops the progress output (the snapshot directories are still printed).
	Quiet bool
	// Refresh asks the hub for the revision even when the cache holds a complete snapshot.
	Refresh bool
	// WithDrafter also fetches each target's published drafter (hfmodel.DraftersFor).
	WithDrafter bool
}

// ParsePull parses `higgsd pull`'s arguments (flags and ids in any order). flag.ErrHelp is returned for -h.
func ParsePull(args []string, usage io.Writer) (PullConfig, error) {
	var c PullConfig
	fs := flag.NewFlagSet("higgsd pull", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprintln(usage, "usage: higgsd pull [flags] ORG/NAME[@REVISION]...\n\n"+
			"Downloads models from the Hugging Face hub (HF_ENDPOINT) into the hub cache ($HF_HUB_CACHE, $HF_HOME/hub\n"+
			"or ~/.cache/huggingface/hub) and prints each snapshot directory. A complete snapshot already there is\n"+
			"used without the network; HF_HUB_OFFLINE=1 forbids the network; HF_TOKEN opens gated repositories.")
		fs.PrintDefaults()
	}
	fs.Var((*listFlag)(&c.Include), "include", "fetch the files matching this glob instead of the model's own (config, tokenizer, chat template, *.safetensors and index); repeat or separate with commas; * stays within a folder")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress output")
	fs.BoolVar(&c.Refresh, "refresh", false, "ask the hub for the revision's commit even when the cache holds a complete snapshot (a branch may have moved)")
	fs.BoolVar(&c.WithDrafter, "with-drafter", false, "also fetch each target's published DFlash / DFlash2 drafter (the one --draft auto would pick)")
	for {
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		if fs.NArg() == 0 {
			break
		}
		c.IDs = append(c.IDs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(c.IDs) == 0 {
		return c, errors.New("higgsd pull: name a model, ORG/NAME[@REVISION]")
	}
	var errs []error
	for _, id := range c.IDs {
		if _, err := hfmodel.ParseHubID(id); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// RunPull fetches cfg's models with the hub client c, printing each snapshot directory on stdout and the
// progress on progress (nil: none). It stops at the first failure.
func RunPull(ctx context.Context, cfg PullConfig, c *hub.Client, stdout io.Writer, progress func(hub.Event)) error {
	c.Progress = progress
	opt := hub.Options{Include: cfg.Include, Refresh: cfg.Refresh}
	for _, arg := range cfg.IDs {
		ids := []string{arg}
		if cfg.WithDrafter {
			pairs := hfmodel.DraftersFor(arg)
			if len(pairs) == 0 {
				return fmt.Errorf("--with-drafter: no known drafter for %s", arg)
			}
			ids = append(ids, pairs[0].Drafter)
		}
		for i, s := range ids {
			id, err := hfmodel.ParseHubID(s)
			if err != nil {
				return err
			}
			o := opt
			if i > 0 {
				o.Include = nil // the drafter's own files, whatever --include asked of the target
			}
			res, err := c.Pull(ctx, id, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, res.Dir)
		}
	}
	return nil
}
