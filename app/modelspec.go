package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// ModelSpec is one of several models higgsd serves: `--model NAME=PATH[,draft=PATH][,alias=A]…` or a
// `[[models]]` table of the configuration file.
type ModelSpec struct {
	// Name is the id requests use; Aliases are other names for the model.
	Name    string
	Aliases []string
	// Path is the target's directory or hub id; Draft the drafter's ("": none).
	Path  string
	Draft string
	// Backend and Kernels override --backend and --kernels for this model ("": theirs).
	Backend string
	Kernels string
	// KeepAlive overrides --keep-alive for this model (nil: --keep-alive's).
	KeepAlive *time.Duration
	// Sampling is the model's default sampling: each knob set replaces the API's default (OpenAI's and
	// Anthropic's temperature 1) of a request that leaves it unset.
	Sampling ports.SamplingDefaults
}

// modelKeys are the keys of a --model NAME=PATH,key=value… spec and of a [[models]] table (with name and
// path); keep_alive is also spelled keep-alive.
var modelKeys = []string{"draft", "alias", "backend", "kernels", "keep_alive", "temperature", "top_p", "top_k", "min_p"}

// parseModelSpec parses NAME=PATH[,key=value]…; alias may repeat.
func parseModelSpec(v string) (ModelSpec, error) {
	fields := strings.Split(v, ",")
	name, path, _ := strings.Cut(fields[0], "=")
	spec := ModelSpec{Name: strings.TrimSpace(name), Path: strings.TrimSpace(path)}
	var errs []error
	for _, f := range fields[1:] {
		k, val, ok := strings.Cut(f, "=")
		k, val = strings.ReplaceAll(strings.TrimSpace(k), "-", "_"), strings.TrimSpace(val)
		if !ok || val == "" {
			errs = append(errs, fmt.Errorf("%q: want key=value, one of %s", f, strings.Join(modelKeys, ", ")))
			continue
		}
		if err := spec.set(k, val); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return spec, fmt.Errorf("--model %q: %w", v, err)
	}
	return spec, nil
}

// set sets one key of the spec; alias adds one.
func (s *ModelSpec) set(k, v string) error {
	switch k {
	case "draft":
		s.Draft = v
	case "alias":
		s.Aliases = append(s.Aliases, v)
	case "backend":
		s.Backend = v
	case "kernels":
		s.Kernels = v
	case "keep_alive":
		d, err := parseKeepAlive(v)
		if err != nil {
			return err
		}
		s.KeepAlive = &d
	case "temperature", "top_p", "min_p":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%s %q: want a number", k, v)
		}
		switch k {
		case "temperature":
			s.Sampling.Temperature = &x
		case "top_p":
			s.Sampling.TopP = &x
		default:
			s.Sampling.MinP = &x
		}
	case "top_k":
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("top_k %q: want a whole number", v)
		}
		s.Sampling.TopK = &n
	default:
		return fmt.Errorf("unknown key %q (want one of %s)", k, strings.Join(modelKeys, ", "))
	}
	return nil
}

// parseKeepAlive reads a keep-alive: a Go duration (5m, 1h30m) or a number of seconds; 0 or negative means
// never unload when idle.
func parseKeepAlive(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n < 1<<33 && n > -(1<<33) {
		return time.Duration(n) * time.Second, nil
	}
	return 0, fmt.Errorf("keep_alive %q: want a duration such as 5m or 1h, or seconds (0 or negative: never unload)", v)
}

// keepAliveFlag is --keep-alive: a duration or seconds, as a model's keep_alive (flag.DurationVar would
// refuse the seconds the docs and a model's own keep_alive take).
type keepAliveFlag struct{ d *time.Duration }

func (k keepAliveFlag) String() string {
	if k.d == nil {
		return ""
	}
	return k.d.String()
}

func (k keepAliveFlag) Set(v string) error {
	d, err := parseKeepAlive(strings.TrimSpace(v))
	if err != nil {
		return err
	}
	*k.d = d
	return nil
}

// modelFlag is --model: a PATH (today's one model, the last given wins) or NAME=PATH,key=value… (one of
// several models; repeat the flag for each). A PATH has no '=' before its first comma.
type modelFlag struct{ c *Config }

func (m modelFlag) String() string {
	if m.c == nil {
		return ""
	}
	if len(m.c.Models) == 0 {
		return m.c.Model
	}
	names := make([]string, len(m.c.Models))
	for i, s := range m.c.Models {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}

func (m modelFlag) Set(v string) error {
	first, _, _ := strings.Cut(v, ",")
	if !strings.Contains(first, "=") {
		m.c.Model = v
		return nil
	}
	spec, err := parseModelSpec(v)
	if err != nil {
		return err
	}
	m.c.Models = append(m.c.Models, spec)
	return nil
}

// list marks a flag that a TOML array sets (each element one Set).
func (modelFlag) list() {}

// reset forgets what a source of lower precedence set (LoadConfig: the environment replaces the file's).
func (m modelFlag) reset() { m.c.Model, m.c.Models = "", nil }

// modelTables reads the [[models]] tables of the configuration file.
func modelTables(path string, v any) ([]ModelSpec, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("config file %s: models: want [[models]] tables (name, path, draft, aliases, backend, kernels, keep_alive, temperature, top_p, top_k, min_p)", path)
	}
	var out []ModelSpec
	var errs []error
	for i, x := range arr {
		t, ok := x.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("config file %s: models[%d]: want a table, not a %T", path, i, x))
			continue
		}
		spec, err := modelTable(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s: models[%d]: %w", path, i, err))
			continue
		}
		out = append(out, spec)
	}
	return out, errors.Join(errs...)
}

// modelTable reads one [[models]] table.
func modelTable(t map[string]any) (ModelSpec, error) {
	var spec ModelSpec
	var errs []error
	for k, v := range t {
		key := strings.ReplaceAll(k, "-", "_")
		if key == "aliases" {
			list, ok := v.([]any)
			if !ok {
				errs = append(errs, fmt.Errorf("aliases: want a list of strings"))
				continue
			}
			for _, a := range list {
				s, ok := a.(string)
				if !ok {
					errs = append(errs, fmt.Errorf("aliases: want strings, not a %T", a))
					continue
				}
				spec.Aliases = append(spec.Aliases, s)
			}
			continue
		}
		s, err := tomlScalar(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		switch key {
		case "name":
			spec.Name = s
		case "path", "model":
			spec.Path = s
		case "alias":
			errs = append(errs, errors.New("alias: write aliases = [\"…\"] in a table"))
		default:
			if err := spec.set(key, s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return spec, errors.Join(errs...)
}

// validateModels checks several models: names, paths, unique names and aliases, and the settings that
// concern one model only.
func (c Config) validateModels() error {
	if len(c.Models) == 0 {
		return nil
	}
	var errs []error
	if c.Model != "" {
		errs = append(errs, fmt.Errorf("--model %q is a bare path beside named models: write NAME=PATH for every model", c.Model))
	}
	if c.Draft != "" {
		errs = append(errs, errors.New("--draft names the drafter of a single model: with several, write draft=PATH in each model's spec"))
	}
	if c.ServedModelName != "" {
		errs = append(errs, errors.New("--served-model-name renames a single model: with several, each model's NAME is its id"))
	}
	if c.Distributed && len(c.Models) > 1 {
		errs = append(errs, errors.New("--distributed splits one model across processes: it cannot serve several"))
	}
	seen := map[string]bool{}
	for i, s := range c.Models {
		at := fmt.Sprintf("model %d (%q)", i+1, s.Name)
		if s.Name == "" {
			errs = append(errs, fmt.Errorf("%s: no name (NAME=PATH, or name = \"…\" in [[models]])", at))
		}
		if s.Path == "" {
			errs = append(errs, fmt.Errorf("%s: no path (NAME=PATH, or path = \"…\" in [[models]])", at))
		}
		for _, n := range append([]string{s.Name}, s.Aliases...) {
			if n == "" {
				continue
			}
			if strings.ContainsAny(n, " \t,=") {
				errs = append(errs, fmt.Errorf("%s: name or alias %q must not hold spaces, commas or '='", at, n))
			}
			if seen[n] {
				errs = append(errs, fmt.Errorf("%s: name or alias %q is already taken", at, n))
			}
			seen[n] = true
		}
		if s.Path != "" {
			if err := c.modelConfig(s).Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
			}
		}
		if err := s.Sampling.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: default sampling: %w", at, err))
		}
	}
	return errors.Join(errs...)
}

// ModelSpecs are the models to serve: the named ones, or today's one (Name "": it is served under its
// directory's name or --served-model-name, and --draft's defaults apply).
func (c Config) ModelSpecs() []ModelSpec {
	if len(c.Models) > 0 {
		return c.Models
	}
	return []ModelSpec{{Path: c.Model, Draft: c.Draft}}
}

// KeepAliveOf is how long spec's model stays loaded while idle (≤ 0: never unloaded while idle).
func (c Config) KeepAliveOf(s ModelSpec) time.Duration {
	if s.KeepAlive != nil {
		return *s.KeepAlive
	}
	return c.KeepAlive
}

// modelConfig is the model-loading part of c for one model.
func (c Config) modelConfig(s ModelSpec) models.ModelConfig { return c.One(s).ModelConfig() }

// One is c as the configuration of spec's model alone (today's form: Model, Draft, Backend, Kernels),
// for what looks at one model at a time (loading, higgsd doctor).
func (c Config) One(s ModelSpec) Config {
	one := c
	one.Models = nil
	one.Model, one.Draft = s.Path, s.Draft // a named Path without Draft has no drafter
	if s.Backend != "" {
		one.Backend = s.Backend
	}
	if s.Kernels != "" {
		one.Kernels = s.Kernels
	}
	return one
}
