package hub

import (
	"fmt"
	"path"
	"strings"
)

// DefaultInclude are the files a model needs to be served: its configs, tokenizer and chat template files,
// and its safetensors weights with their index. Only the repository's top level (a `*` does not cross a `/`):
// subfolders hold other formats (original/, onnx/). Weights in other formats (.bin, .pth, .gguf) are never
// fetched by default: higgs reads safetensors.
var DefaultInclude = []string{
	"config.json",
	"generation_config.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"special_tokens_map.json",
	"added_tokens.json",
	"vocab.json",
	"merges.txt",
	"chat_template.jinja",
	"chat_template.json",
	"*.safetensors",
	"*.safetensors.index.json",
}

// checkPatterns reports the first pattern path.Match cannot parse.
func checkPatterns(patterns []string) error {
	for _, p := range patterns {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("--include: an empty pattern")
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("--include %q: %w", p, err)
		}
	}
	return nil
}

// included reports whether a repository file (slash-separated) matches one of the patterns (path.Match: `*`
// and `?` stay within one path element, `[...]` is a class).
func included(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// safeName reports whether a repository file name may become a path under a snapshot: relative,
// slash-separated, no empty, `.` or `..` element, no backslash or NUL.
func safeName(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") {
		return false
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return false
		}
	}
	return true
}

// safeToken reports whether an etag or commit may be a file name: letters, digits, '-', '_' and '.', not
// only dots, at most 128 bytes.
func safeToken(s string) bool {
	if s == "" || len(s) > 128 || strings.Trim(s, ".") == "" {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}
