package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/pelletier/go-toml/v2"
	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// Config is higgsd's configuration. Sources, highest precedence first: command-line flags, HIGGS_*
// environment variables (the flag name upper-cased, dashes as underscores: --max-body-bytes →
// HIGGS_MAX_BODY_BYTES), a TOML file (--config or HIGGS_CONFIG; keys are the flag names, with dashes or
// underscores), then the defaults.
type Config struct {
	// Model is today's one model (--model PATH); Models are several (--model NAME=PATH,… or [[models]]
	// tables), each loaded on its first request.
	Model  string
	Models []ModelSpec
	// KeepAlive is how long an idle model of several stays loaded (≤ 0: until another needs its memory);
	// a model's keep_alive overrides it.
	KeepAlive time.Duration
	Draft     string
	NoDraft   bool
	// Pull lets higgsd download a hub model missing from the cache before loading it (models.ModelConfig.Pull).
	Pull      bool
	BlockSize int
	Adaptive  bool
	// TreeBudget and TreeWidth are serve.ServeConfig's: tree verification's node budget (0: chains only) and
	// candidates per slot.
	TreeBudget int
	TreeWidth  int
	// TreeFullDraft drafts a tree's block in full (speculative.TreeConfig.FullDraft).
	TreeFullDraft bool
	Backend       string
	Threads       int
	Kernels       string
	// KVBits is the attention KV cache's format (models.ModelConfig.KVBits): 0 full precision, 8 int8.
	KVBits int
	Host   string
	Port   int
	// APIKeys (--api-key, repeatable) and the keys of APIKeyFile (one a line) are the tenant keys: each is a
	// tenant of its own. AdminKey is the operator's (every tenant's events). No key at all: no
	// authentication, one tenant.
	APIKeys    []string
	APIKeyFile string
	AdminKey   string
	// AllowedHosts are Host names answered to besides localhost names, IP addresses and --host; CORSOrigins
	// the origins whose pages may call the APIs (httpapi.Browser; BrowserPolicy decides the defaults).
	AllowedHosts    []string
	CORSOrigins     []string
	MaxBodyBytes    int64
	BodyTimeout     time.Duration
	RequestTimeout  time.Duration
	ShutdownTimeout time.Duration
	QueueSize       int
	// MaxConcurrency is the batch size (ServeConfig.MaxConcurrency); BatchWait, PrefillChunk and
	// MemoryBudget tune the batch (ServeConfig).
	MaxConcurrency int
	BatchWait      time.Duration
	PrefillChunk   int
	MemoryBudget   int64
	// PrefixCacheBytes is the prefix cache's budget (0: off); PrefixCacheEvery its boundary interval;
	// PrefixCacheShared lets tenants reuse each other's prefixes (a trusted deployment).
	PrefixCacheBytes  int64
	PrefixCacheEvery  int
	PrefixCacheShared bool
	// PrefixCacheDir is the prefix cache's disk tier ("": none); PrefixCacheDiskBytes what it may keep there.
	PrefixCacheDir       string
	PrefixCacheDiskBytes int64
	LogLevel             string
	LogFormat            string
	ServedModelName      string
	// SpecialTokensInContent restores the unsafe encoding of message text (every role's content, assistant
	// turns' tool calls), where special-token text (<|im_end|>) sent by a client becomes the control token.
	SpecialTokensInContent bool
	ConfigFile             string
	// Distributed splits the model across processes with MLX distributed (app/distributed.go); RankTimeout
	// is how soon a lost rank is noticed (the heartbeats' bound).
	Distributed bool
	RankTimeout time.Duration
	// DefaultMaxTokens is the output limit of a request without max_tokens (ServeConfig.DefaultMaxTokens:
	// 0 the model's generation config, else serve.FallbackMaxTokens; -1 none).
	DefaultMaxTokens int
	// ContextLength caps the model's context length (0: the model's own).
	ContextLength int
	// Version asks higgsd to print its version and exit.
	Version bool
	// Providers (--provider, repeatable) are remote providers and Routes (--route, repeatable) the models
	// sent to them (Routing reads both); providerKeys holds each provider's key, read by LoadConfig from the
	// environment variable its key_env names (unexported: never printed with the configuration).
	Providers    []string
	Routes       []string
	providerKeys map[string]string
}

// DefaultConfig serves the bundled gocoder model with its drafter on 127.0.0.1:8000.
func DefaultConfig() Config {
	return Config{
		Backend: models.BackendCPU,
		Kernels: models.KernelsAuto,
		// Speculation only where it pays: a fixed block on a CPU can run several times slower than plain
		// decoding (the demo at block 16: 0.32× autoregressive); the policy settles on the best block size,
		// plain decoding included. --adaptive=false keeps the fixed block.
		Adaptive: true,
		// Trees where the adaptive policy measures that they pay (a fixed block keeps chains).
		TreeBudget:      TreeAuto,
		Host:            "127.0.0.1",
		Port:            8000,
		MaxBodyBytes:    4 << 20,
		BodyTimeout:     30 * time.Second,
		RequestTimeout:  10 * time.Minute,
		ShutdownTimeout: 30 * time.Second,
		QueueSize:       64,
		// Eight sequences share each round: with a batched forward the weights stream once for all of them.
		MaxConcurrency: 8,
		BatchWait:      2 * time.Millisecond,
		PrefillChunk:   256,
		// 1 GiB holds the demo's state for ~1M positions and a 4B hybrid's for tens of thousands: many
		// conversations' prompts at once, a small share of a serving machine's memory.
		PrefixCacheBytes:     1 << 30,
		PrefixCacheEvery:     512,
		PrefixCacheDiskBytes: 8 << 30,
		LogLevel:             "info",
		LogFormat:            "console",
		KeepAlive:            DefaultKeepAlive,
		RankTimeout:          models.DefaultRankTimeout,
	}
}

// TreeAuto is --tree-budget's default, generation.TreeAuto: the adaptive policy weighs trees up to the block
// size; a fixed block keeps chains.
const TreeAuto = -1

// DefaultKeepAlive is how long an idle model of several stays loaded when neither --keep-alive nor its own
// keep_alive says: long enough for a conversation's pauses, short enough to give the memory back.
const DefaultKeepAlive = 5 * time.Minute

// flagSet declares every setting on fs, bound to c.
func (c *Config) flagSet(fs *flag.FlagSet) {
	fs.Var(modelFlag{c}, "model", "target model directory or Hugging Face id in the local hub cache (default: the bundled gocoder model models/gocoder/target); or NAME=PATH[,draft=PATH][,alias=A]…[,backend=B][,kernels=K][,keep_alive=D], repeated, for several models loaded on demand")
	fs.Var(keepAliveFlag{&c.KeepAlive}, "keep-alive", "with several models: how long an idle model stays loaded, a duration or seconds (0 or negative: until another model needs its memory)")
	fs.StringVar(&c.Draft, "draft", c.Draft, "DFlash drafter directory or hub id (default with the bundled model: models/gocoder/drafter; \"none\": no drafter; \"auto\": the target's published drafter, from the table of known pairs)")
	fs.BoolVar(&c.Pull, "pull", c.Pull, "download a hub model (--model, --draft, or the drafter --draft auto picks) that is not in the Hugging Face cache before loading it (default: never download; see `higgsd pull`)")
	fs.BoolVar(&c.NoDraft, "no-draft", c.NoDraft, "turn speculative decoding off (load no drafter)")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "speculative block size, anchor included (0: the drafter's; 1: no speculation)")
	fs.BoolVar(&c.Adaptive, "adaptive", c.Adaptive, "let the adaptive depth policy choose each round's block size")
	fs.IntVar(&c.TreeBudget, "tree-budget", c.TreeBudget, "let speculative rounds verify a tree of the drafter's top candidates of at most this many nodes, anchor included (with --adaptive the policy chooses tree or chain and the budget, from measured cost and acceptance; without it every speculative round verifies a tree); -1: the adaptive policy weighs trees up to the block size and a fixed block keeps chains; 0: chains only. Used where the backend verifies trees and the request allows it (greedy or seeded sampling; no constraint or logprobs)")
	fs.IntVar(&c.TreeWidth, "tree-width", c.TreeWidth, "with --tree-budget: the most candidates a draft slot contributes to the tree (0: 4)")
	fs.BoolVar(&c.TreeFullDraft, "tree-full-draft", c.TreeFullDraft, "draft a tree round's block through every drafter layer on every slot (the drafter's exact proposals); by default the layers after the first run on the slots the tree can reach alone, a fraction of the drafter's work, at the same output")
	fs.StringVar(&c.Backend, "backend", c.Backend, "compute backend: cpu, mlx or auto")
	fs.IntVar(&c.Threads, "threads", c.Threads, "CPU worker threads (0: GOMAXPROCS)")
	fs.StringVar(&c.Kernels, "kernels", c.Kernels, "CPU kernels: auto (fast where the CPU has AVX2 or better, else exact), exact (the bit-exact reference) or fast (quantized products with int8 inputs; not bit-identical)")
	fs.IntVar(&c.KVBits, "kv-bits", c.KVBits, "attention KV cache format: 0 (full precision: float32 on the cpu backend; 32 says the same there) or 8 (int8 with a scale per position and KV head: about a quarter of a float32 cache's memory, not bit-identical; cpu and mlx, not --distributed)")
	fs.StringVar(&c.Host, "host", c.Host, "address to listen on (a wider bind such as 0.0.0.0 must be asked for)")
	fs.IntVar(&c.Port, "port", c.Port, "TCP port to listen on (0: any free port)")
	fs.Var((*keyList)(&c.APIKeys), "api-key", "require `KEY` on /v1/ routes ('Authorization: Bearer KEY'; the Messages API also takes 'x-api-key: KEY'); repeat for more keys, each a tenant of its own (its own prefix cache and event stream)")
	fs.StringVar(&c.APIKeyFile, "api-key-file", c.APIKeyFile, "file of tenant keys, one a line (blank lines and lines starting with # are skipped; surrounding spaces trimmed), added to --api-key's")
	fs.StringVar(&c.AdminKey, "admin-key", c.AdminKey, "operator key: accepted on /v1/ routes like a tenant key, and its event stream (/v1/events) shows every tenant's generations")
	fs.Var((*listFlag)(&c.AllowedHosts), "allowed-hosts", "a Host name the server answers to besides localhost names, IP addresses and --host (a guard against DNS rebinding): NAME (any port), NAME:PORT, .NAME (it and every name under it) or * (any); repeat the flag or separate with commas (default on a non-loopback --host with a key: *)")
	fs.Var((*listFlag)(&c.CORSOrigins), "cors-origin", "let pages of this origin (scheme://host[:port]) call the APIs across origins (CORS), or * for every origin; repeat the flag or separate with commas (default: CORS off)")
	fs.Var(byteSize{&c.MaxBodyBytes}, "max-body-bytes", "largest request body accepted: bytes, or a size with a unit (4MiB, 1.5MB)")
	fs.DurationVar(&c.BodyTimeout, "body-timeout", c.BodyTimeout, "longest a client may take to send a request body (a slower one is answered 408)")
	fs.BoolVar(&c.SpecialTokensInContent, "special-tokens-in-content", c.SpecialTokensInContent, "encode special-token text (<|im_end|>…) in message content (every role, assistant tool calls included) as control tokens, letting clients forge turns (default: plain text)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "longest a generation request may take (0: no limit)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "on SIGINT/SIGTERM, how long in-flight requests may finish before they are cut (ended with their API's error; exit status 3)")
	fs.IntVar(&c.QueueSize, "queue-size", c.QueueSize, "requests that may wait for the engine; more are answered 429")
	fs.IntVar(&c.MaxConcurrency, "max-concurrency", c.MaxConcurrency, "batch size: generations decoded together, each round's drafts and verifies of all of them run as one batched call (more wait in the queue)")
	fs.DurationVar(&c.BatchWait, "batch-wait", c.BatchWait, "longest a round waits for a generation that has not sent its next block (one busy writing to a slow client)")
	fs.IntVar(&c.PrefillChunk, "prefill-chunk", c.PrefillChunk, "prefill prompts in forwards of at most this many tokens, interleaved with the running streams' rounds (0: whole prompts)")
	fs.Var(byteSize{&c.MemoryBudget}, "memory-budget-bytes", "KV cache and state the running requests may reserve together, and with several models every loaded model's weights and prefix cache too: bytes, or a size with a unit (4GiB, 512MiB, 1.5GB); a request that does not fit waits, one that never can is refused (0: half the machine's memory less the prefix cache; with several models three quarters of it)")
	fs.Var(byteSize{&c.PrefixCacheBytes}, "prefix-cache-bytes", "memory the prefix cache may hold: bytes, or a size with a unit (1GiB) (attention KV, recurrent state and drafter context of earlier prompts, reused by requests that start the same way; 0: off)")
	fs.IntVar(&c.PrefixCacheEvery, "prefix-cache-every", c.PrefixCacheEvery, "besides each prompt's and generation's end, cache the prompt's state every this many tokens (0: only at the ends)")
	fs.StringVar(&c.PrefixCacheDir, "prefix-cache-dir", c.PrefixCacheDir, "a directory for the prefix cache's disk tier: entries evicted from memory, and at shutdown those still in memory, are written there and reused across restarts (cpu backend; default: none, memory only)")
	fs.Var(byteSize{&c.PrefixCacheDiskBytes}, "prefix-cache-disk-bytes", "what the prefix cache's disk tier may keep in --prefix-cache-dir: bytes, or a size with a unit (8GiB); the least recently used records go first")
	fs.BoolVar(&c.PrefixCacheShared, "prefix-cache-shared", c.PrefixCacheShared, "share the prefix cache between tenants (keys): a hit, cached_tokens and the time to first token then tell one client about another's prompts; only for a trusted deployment (default: each tenant reuses only its own prompts)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "trace, debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "console or json")
	fs.StringVar(&c.ServedModelName, "served-model-name", c.ServedModelName, "model id clients use (default: the model directory's name)")
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "TOML configuration file")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "output limit of a request that sets no max_tokens (0: the model's generation_config.json max_new_tokens, else 1024; -1: none, up to the context length)")
	fs.IntVar(&c.ContextLength, "context-length", c.ContextLength, "cap the model's context length, prompt and output together, at this many tokens (0: the model's own; more than the model's is refused)")
	fs.BoolVar(&c.Version, "version", c.Version, "print higgsd's version (module version, VCS revision, Go version) and exit")
	fs.Var((*entryList)(&c.Providers), "provider", "a remote provider: `NAME=openai|anthropic,URL[,key_env=VAR]` (the key is read from the environment variable VAR); repeat for more (docs/providers.md)")
	fs.Var((*entryList)(&c.Routes), "route", "send requests whose model the regular expression matches (the whole name) to a provider: `REGEX=PROVIDER`; repeat for more, the first match wins; other models are served here")
	fs.BoolVar(&c.Distributed, "distributed", c.Distributed, "split the model's layers across processes with MLX distributed (MLX_RANK, MLX_HOSTFILE as mlx.launch sets them; rank 0 serves HTTP, the others are workers); needs the mlx backend")
	fs.DurationVar(&c.RankTimeout, "rank-timeout", c.RankTimeout, "with --distributed, how soon a lost rank is noticed: ranks exchange heartbeats beside the model's rounds, and one silent this long (a dead process: at once) fails the running requests and /health with 503 naming it; every rank should be given the same value")
}

// keyList is the repeatable --api-key: each Set adds a key. A source of lower precedence (the file, then the
// environment) is replaced, not added to, by one above it (LoadConfig resets it).
type keyList []string

func (l *keyList) String() string {
	if l == nil || len(*l) == 0 {
		return ""
	}
	return fmt.Sprintf("(%d keys)", len(*l)) // never the keys: flag prints defaults
}

func (l *keyList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// list marks a flag that a TOML array sets (each element one Set).
func (l *keyList) list() {}

// EnvName is the environment variable for a flag.
func EnvName(flagName string) string {
	return "HIGGS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// LoadConfig builds the configuration from args (without the program name), getenv and the optional TOML
// file, and validates it. Every problem is reported at once. flag.ErrHelp is returned (wrapped) for -h.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("higgsd", flag.ContinueOnError)
	fs.SetOutput(usage)
	cfg.flagSet(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q (all settings are flags)", fs.Args())
	}
	if cfg.Version {
		// --version answers whatever else the environment or a configuration file says.
		return cfg, nil
	}
	onCmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdline[f.Name] = true })
	var errs []error
	fromFile := map[string]bool{}
	path := cfg.ConfigFile
	if !onCmdline["config"] {
		path = getenv(EnvName("config"))
	}
	if path != "" {
		values, tables, err := readTOML(path)
		if err != nil {
			errs = append(errs, err)
		}
		if len(tables) > 0 && !onCmdline["model"] {
			cfg.Models = append(cfg.Models, tables...)
			fromFile["model"] = true
		}
		keys := make([]string, 0, len(values))
		for k := range values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			name := strings.ReplaceAll(k, "_", "-")
			f := fs.Lookup(name)
			switch {
			case f == nil || name == "config":
				errs = append(errs, fmt.Errorf("config file %s: unknown key %q", path, k))
			case onCmdline[name]:
			case values[k].list && !isList(f):
				errs = append(errs, fmt.Errorf("config file %s: %s: a list is not a value of this setting", path, k))
			default:
				fromFile[name] = true
				for _, v := range values[k].vals {
					if err := f.Value.Set(v); err != nil {
						errs = append(errs, fmt.Errorf("config file %s: %s: %w", path, k, err))
					}
				}
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		env := EnvName(f.Name)
		v, ok := lookupEnv(getenv, env)
		if !ok || onCmdline[f.Name] || f.Name == "config" {
			return
		}
		switch l := f.Value.(type) {
		case *keyList:
			if fromFile[f.Name] {
				*l = nil // the environment replaces the file's list
			}
		case *listFlag:
			if fromFile[f.Name] {
				*l = nil
			}
		case *entryList:
			if fromFile[f.Name] {
				*l = nil
			}
		case modelFlag:
			if fromFile[f.Name] {
				l.reset()
			}
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", env, v, err))
		}
	})
	cfg.ConfigFile = path
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	} else if providers, _, err := cfg.Routing(); err == nil {
		if cfg.providerKeys, err = providerKeys(providers, getenv); err != nil {
			errs = append(errs, err)
		}
	}
	return cfg, errors.Join(errs...)
}

func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func isList(f *flag.Flag) bool {
	_, ok := f.Value.(interface{ list() })
	return ok
}

// tomlValue is a TOML value as the strings its flag parses: one, or an array's elements (for a list setting).
type tomlValue struct {
	vals []string
	list bool
}

// readTOML reads a flat TOML table and renders each value as the strings its flag parses; the [[models]]
// tables are returned apart.
func readTOML(path string) (map[string]tomlValue, []ModelSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config file: %w", err)
	}
	var raw map[string]any
	if err := toml.Unmarshal(b, &raw); err != nil {
		return nil, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := make(map[string]tomlValue, len(raw))
	var errs []error
	var tables []ModelSpec
	if v, ok := raw["models"]; ok {
		delete(raw, "models")
		if tables, err = modelTables(path, v); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range raw {
		if tt, ok := tomlTables[k]; ok {
			if vals, err := tomlTableList(v, tt.render); err != nil {
				errs = append(errs, fmt.Errorf("config file %s: [[%s]]: %w", path, k, err))
			} else {
				out[tt.flag] = tomlValue{vals: vals, list: true}
			}
			continue
		}
		if arr, ok := v.([]any); ok {
			vals := make([]string, 0, len(arr))
			for _, e := range arr {
				s, ok := e.(string)
				if !ok {
					errs = append(errs, fmt.Errorf("config file %s: %s: a list holds strings, not a %T", path, k, e))
					break
				}
				vals = append(vals, s)
			}
			out[k] = tomlValue{vals: vals, list: true}
			continue
		}
		s, err := tomlScalar(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s: %s: %w", path, k, err))
			continue
		}
		out[k] = tomlValue{vals: []string{s}}
	}
	return out, tables, errors.Join(errs...)
}

// tomlTableList renders an array of tables with render, one flag entry each.
func tomlTableList(v any, render func(map[string]any) (string, error)) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of tables, not a %T", v)
	}
	var vals []string
	var errs []error
	for i, e := range arr {
		t, ok := e.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("entry %d: want a table, not a %T", i+1, e))
			continue
		}
		s, err := render(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %d: %w", i+1, err))
			continue
		}
		vals = append(vals, s)
	}
	return vals, errors.Join(errs...)
}

func tomlScalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("a %T is not a setting value (want a string, number or boolean)", v)
}

// ReadKeyFile reads a file of keys, one a line: surrounding spaces are trimmed, blank lines and lines
// starting with # are skipped. Each key is named by its file and line for error messages.
func ReadKeyFile(path string) ([]httpapi.NamedKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	var keys []httpapi.NamedKey
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, httpapi.NamedKey{Key: line, From: fmt.Sprintf("%s:%d", path, i+1)})
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-key-file %s holds no key (an empty file would leave the server open)", path)
	}
	return keys, nil
}

// Keys are the keys the server accepts: every --api-key, then --api-key-file's, each a tenant, and
// --admin-key. Every problem is reported at once (a duplicate key, one no client could send, an unreadable
// or empty file), naming where the key was given, never the key.
func (c Config) Keys() (*httpapi.Keys, error) {
	named := make([]httpapi.NamedKey, 0, len(c.APIKeys))
	for i, k := range c.APIKeys {
		named = append(named, httpapi.NamedKey{Key: k, From: fmt.Sprintf("--api-key %d", i+1)})
	}
	var errs []error
	if c.APIKeyFile != "" {
		fileKeys, err := ReadKeyFile(c.APIKeyFile)
		if err != nil {
			errs = append(errs, err)
		}
		named = append(named, fileKeys...)
	}
	keys, err := httpapi.NewKeys(named, c.AdminKey)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return keys, nil
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.ModelConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateModels(); err != nil {
		errs = append(errs, err)
	}
	if c.BlockSize < 0 {
		errs = append(errs, fmt.Errorf("--block-size %d must be ≥ 0", c.BlockSize))
	}
	if c.TreeBudget < TreeAuto || c.TreeBudget == 1 {
		errs = append(errs, fmt.Errorf("--tree-budget %d must be -1 (trees where the adaptive policy finds they pay), 0 (chains only) or ≥ 2", c.TreeBudget))
	}
	if c.TreeWidth < 0 {
		errs = append(errs, fmt.Errorf("--tree-width %d must be ≥ 0 (0: the default)", c.TreeWidth))
	}
	if c.Host == "" {
		errs = append(errs, errors.New("--host must not be empty"))
	} else if strings.ContainsAny(c.Host, " /") {
		errs = append(errs, fmt.Errorf("--host %q is not a host name or address", c.Host))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d out of range [0, 65535]", c.Port))
	}
	for _, h := range c.AllowedHosts {
		if err := validAllowedHost(h); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range c.CORSOrigins {
		if o == "*" {
			continue
		}
		if _, err := httpapi.NormalOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("--cors-origin: %w", err))
		}
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("--max-body-bytes %d must be at least 1024", c.MaxBodyBytes))
	}
	if c.BodyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--body-timeout %v must be > 0", c.BodyTimeout))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("--request-timeout %v must be ≥ 0", c.RequestTimeout))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v must be ≥ 0", c.ShutdownTimeout))
	}
	if c.QueueSize < 0 {
		errs = append(errs, fmt.Errorf("--queue-size %d must be ≥ 0", c.QueueSize))
	}
	if c.MaxConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrency %d must be ≥ 1", c.MaxConcurrency))
	}
	if c.BatchWait < 0 {
		errs = append(errs, fmt.Errorf("--batch-wait %v must be ≥ 0", c.BatchWait))
	}
	if c.PrefillChunk < 0 {
		errs = append(errs, fmt.Errorf("--prefill-chunk %d must be ≥ 0 (0: whole prompts)", c.PrefillChunk))
	}
	if c.MemoryBudget < 0 {
		errs = append(errs, fmt.Errorf("--memory-budget-bytes %d must be ≥ 0 (0: from the machine's memory)", c.MemoryBudget))
	}
	if c.PrefixCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("--prefix-cache-bytes %d must be ≥ 0 (0 turns the cache off)", c.PrefixCacheBytes))
	}
	if c.PrefixCacheEvery < 0 {
		errs = append(errs, fmt.Errorf("--prefix-cache-every %d must be ≥ 0", c.PrefixCacheEvery))
	}
	if c.PrefixCacheDiskBytes < 0 {
		errs = append(errs, fmt.Errorf("--prefix-cache-disk-bytes %d must be ≥ 0", c.PrefixCacheDiskBytes))
	}
	if c.PrefixCacheDir != "" && c.PrefixCacheDiskBytes == 0 {
		errs = append(errs, errors.New("--prefix-cache-dir needs --prefix-cache-disk-bytes > 0"))
	}
	if c.PrefixCacheDir != "" && c.PrefixCacheBytes == 0 {
		errs = append(errs, errors.New("--prefix-cache-dir needs the prefix cache on (--prefix-cache-bytes > 0)"))
	}
	if c.DefaultMaxTokens < -1 {
		errs = append(errs, fmt.Errorf("--default-max-tokens %d must be ≥ -1 (0: the model's, -1: none)", c.DefaultMaxTokens))
	}
	if c.RankTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--rank-timeout %v must be > 0", c.RankTimeout))
	}
	if c.ContextLength < 0 {
		errs = append(errs, fmt.Errorf("--context-length %d must be ≥ 0 (0: the model's)", c.ContextLength))
	}
	if _, err := zerolog.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		errs = append(errs, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", c.LogLevel))
	}
	if c.LogFormat != "console" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want console or json", c.LogFormat))
	}
	if _, err := c.Keys(); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := c.Routing(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Addr is the listen address.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// ModelConfig is the model-loading part of c.
func (c Config) ModelConfig() models.ModelConfig {
	return models.ModelConfig{Model: c.Model, Draft: c.Draft, NoDraft: c.NoDraft, Pull: c.Pull, Backend: c.Backend, Threads: c.Threads, Kernels: c.Kernels, KVBits: c.KVBits, Distributed: c.Distributed,
		RankTimeout: c.RankTimeout}
}

// ServeConfig is the use-case part of c.
func (c Config) ServeConfig() serve.ServeConfig {
	bs := c.BlockSize
	if c.NoDraft {
		bs = 1
	}
	return serve.ServeConfig{ServedModelName: c.ServedModelName, BlockSize: bs, Adaptive: c.Adaptive,
		TreeBudget: c.TreeBudget, TreeWidth: c.TreeWidth, TreeFullDraft: c.TreeFullDraft,
		MaxConcurrency: c.MaxConcurrency, BatchWait: c.BatchWait, PrefillChunk: c.PrefillChunk, MemoryBudget: c.MemoryBudget,
		QueueSize: c.QueueSize, SpecialTokensInContent: c.SpecialTokensInContent,
		PrefixCacheBytes: c.PrefixCacheBytes, PrefixCacheEvery: c.PrefixCacheEvery, PrefixCacheShared: c.PrefixCacheShared,
		PrefixCacheDir: c.PrefixCacheDir, PrefixCacheDiskBytes: c.PrefixCacheDiskBytes,
		DefaultMaxTokens: c.DefaultMaxTokens, ContextLength: c.ContextLength, Version: Version("higgsd")}
}

// BrowserPolicy is what a web page may make a browser do with the server (httpapi.Browser). Host names
// besides localhost names, IP addresses and --host must be listed in --allowed-hosts, except on a
// non-loopback --host with a key (--api-key, --api-key-file or --admin-key) and no --allowed-hosts, where any Host is answered: a DNS-rebinding page
// cannot send the key, and machines reached by their names keep working (docs/serving.md#browser-safety).
func (c Config) BrowserPolicy() httpapi.Browser {
	hosts := c.AllowedHosts
	if len(hosts) == 0 && c.hasKey() && !c.loopback() {
		hosts = []string{"*"}
	}
	return httpapi.Browser{Listen: c.Host, AllowedHosts: hosts, CORSOrigins: c.CORSOrigins}
}

// validAllowedHost checks one --allowed-hosts entry: *, NAME, NAME:PORT or .NAME.
func validAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	name := strings.TrimPrefix(h, ".")
	if host, port, err := net.SplitHostPort(name); err == nil {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("--allowed-hosts %q: the port must be a number in [1, 65535]", h)
		}
		name = host
	}
	if name == "" || strings.ContainsAny(name, " /:@*?#[]") {
		return fmt.Errorf("--allowed-hosts %q: want *, NAME, NAME:PORT or .NAME (a host name, no scheme or path)", h)
	}
	return nil
}

// loopback reports whether --host is this machine only.
func (c Config) loopback() bool {
	if c.Host == "localhost" {
		return true
	}
	ip := net.ParseIP(c.Host)
	return ip != nil && ip.IsLoopback()
}

// hasKey reports whether the APIs require a key.
func (c Config) hasKey() bool { return len(c.APIKeys) > 0 || c.APIKeyFile != "" || c.AdminKey != "" }

// ExposedWithoutKey reports whether the server listens beyond this machine with no key: anyone who can
// reach the port may then use the model.
func (c Config) ExposedWithoutKey() bool {
	return !c.hasKey() && !c.loopback()
}

// listFlag is a flag that may be repeated, each value a comma-separated list; whitespace around an item and
// empty items are dropped.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

// list marks a flag that a TOML array sets (each element one Set).
func (l *listFlag) list() {}

func (l *listFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

// durationUnits is set once: zerolog keeps its duration format process-wide.
var durationUnits sync.Once

// UseDurationUnits makes zerolog's Dur fields print as Go durations with their unit ("41.9ms", "30s")
// instead of bare numbers of a unit the reader must guess. Both binaries call it when building their logger.
func UseDurationUnits() {
	durationUnits.Do(func() { zerolog.DurationFieldFormat = zerolog.DurationFormatString })
}

// NewLogger builds the process logger from c (console for people, json for machines), with durations
// printed with their units.
func NewLogger(c Config, w io.Writer) zerolog.Logger {
	UseDurationUnits()
	lvl, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if c.LogFormat == "console" {
		// Colours only on a terminal: escape codes in a log file or a journal are noise.
		noColor := true
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			noColor = false
		}
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: noColor}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}
