package openai

import (
	"encoding/json"
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// TokenizeBody is a POST /tokenize body in vLLM's shape, with llama.cpp's spellings accepted: exactly one
// of prompt (content, llama.cpp's name) and messages.
type TokenizeBody struct {
	Model    string          `json:"model"`
	Prompt   *string         `json:"prompt"`
	Content  *string         `json:"content"`
	Messages json.RawMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
	// ChatTemplateKwargs are passed to the template as on /v1/chat/completions.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// AddSpecialTokens (add_special, llama.cpp's name) encodes a prompt with the tokenizer's added special
	// tokens (default true); messages ignore it, their template writing its own.
	AddSpecialTokens *bool `json:"add_special_tokens"`
	AddSpecial       *bool `json:"add_special"`
	// AddGenerationPrompt must be true (the default): messages are tokenized as the chat endpoint prefills them.
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
	ContinueFinal       *bool `json:"continue_final_message"`
	ReturnTokenStrs     *bool `json:"return_token_strs"`
	WithPieces          *bool `json:"with_pieces"`
}

// TokenizeResponse is vLLM's /tokenize answer; llama.cpp's clients read its tokens.
type TokenizeResponse struct {
	Tokens      []ports.Token `json:"tokens"`
	Count       int           `json:"count"`
	MaxModelLen int           `json:"max_model_len"`
}

// DetokenizeBody is a POST /detokenize body (vLLM's and llama.cpp's).
type DetokenizeBody struct {
	Model  string         `json:"model"`
	Tokens *[]ports.Token `json:"tokens"`
}

// DetokenizeResponse carries the text under vLLM's name (prompt) and llama.cpp's (content).
type DetokenizeResponse struct {
	Prompt  string `json:"prompt"`
	Content string `json:"content"`
}

// ParseTokenize decodes and checks a /tokenize body into the request whose prompt is tokenized and whether
// special tokens are added.
func ParseTokenize(body []byte) (ports.GenerateRequest, bool, error) {
	var b TokenizeBody
	if err := decodeJSON(body, &b); err != nil {
		return ports.GenerateRequest{}, false, err
	}
	switch {
	case b.AddGenerationPrompt != nil && !*b.AddGenerationPrompt:
		return ports.GenerateRequest{}, false, unsupported("add_generation_prompt", "messages are tokenized as /v1/chat/completions prefills them, with the generation prompt")
	case b.ContinueFinal != nil && *b.ContinueFinal:
		return ports.GenerateRequest{}, false, unsupported("continue_final_message", "messages are tokenized as /v1/chat/completions prefills them, with a new assistant turn")
	case b.ReturnTokenStrs != nil && *b.ReturnTokenStrs:
		return ports.GenerateRequest{}, false, unsupported("return_token_strs", "POST /detokenize turns ids back into text")
	case b.WithPieces != nil && *b.WithPieces:
		return ports.GenerateRequest{}, false, unsupported("with_pieces", "POST /detokenize turns ids back into text")
	case b.Prompt != nil && b.Content != nil:
		return ports.GenerateRequest{}, false, badRequest("prompt", "set prompt or content (its llama.cpp name), not both")
	case b.AddSpecialTokens != nil && b.AddSpecial != nil:
		return ports.GenerateRequest{}, false, badRequest("add_special_tokens", "set add_special_tokens or add_special (its llama.cpp name), not both")
	}
	prompt := b.Prompt
	if prompt == nil {
		prompt = b.Content
	}
	addSpecial := true
	if b.AddSpecialTokens != nil {
		addSpecial = *b.AddSpecialTokens
	} else if b.AddSpecial != nil {
		addSpecial = *b.AddSpecial
	}
	hasMessages := !isNull(b.Messages)
	switch {
	case prompt != nil && hasMessages:
		return ports.GenerateRequest{}, false, badRequest("messages", "set either prompt or messages, not both")
	case prompt == nil && !hasMessages:
		return ports.GenerateRequest{}, false, badRequest("prompt", "prompt (or content) or messages is required")
	case prompt != nil:
		if *prompt == "" {
			return ports.GenerateRequest{}, false, badRequest("prompt", "prompt must not be empty")
		}
		return ports.GenerateRequest{Model: b.Model, Prompt: *prompt}, addSpecial, nil
	}
	// Messages, tools and template arguments are read as the chat endpoint reads them.
	chat := map[string]json.RawMessage{"messages": b.Messages}
	if !isNull(b.Tools) {
		chat["tools"] = b.Tools
	}
	if !isNull(b.ChatTemplateKwargs) {
		chat["chat_template_kwargs"] = b.ChatTemplateKwargs
	}
	raw, err := json.Marshal(chat)
	if err != nil {
		return ports.GenerateRequest{}, false, badRequest("messages", "%v", err)
	}
	req, err := ParseChat(raw)
	if err != nil {
		return ports.GenerateRequest{}, false, err
	}
	gen := req.Gen
	gen.Model = b.Model
	gen.Constraint = nil
	return gen, addSpecial, nil
}

// ParseDetokenize decodes and checks a /detokenize body.
func ParseDetokenize(body []byte) (model string, ids []ports.Token, err error) {
	var b DetokenizeBody
	if err := decodeJSON(body, &b); err != nil {
		return "", nil, err
	}
	if b.Tokens == nil {
		return "", nil, badRequest("tokens", "tokens is required")
	}
	return b.Model, *b.Tokens, nil
}

// registerTokenize serves POST /tokenize and POST /detokenize at the root, where vLLM and llama.cpp serve
// them; with an API key they need it, as the /v1/ routes do.
func (s *Server) registerTokenize(route func(string, http.Handler)) {
	route("POST /tokenize", s.keyed(http.HandlerFunc(s.tokenize)))
	route("POST /detokenize", s.keyed(http.HandlerFunc(s.detokenize)))
	route("/tokenize", methodNotAllowed("POST"))
	route("/detokenize", methodNotAllowed("POST"))
}

// keyed requires one of the keys (when any is set) on a route outside /v1/, as authenticate does on /v1/.
func (s *Server) keyed(next http.Handler) http.Handler {
	if !s.opts.Keys.Required() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := s.opts.Keys.Identify(httpapi.BearerToken(r.Header.Get("Authorization")))
		if !ok {
			httpapi.RefuseUnread(w, r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="higgs"`)
			writeError(w, &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error",
				Code: "invalid_api_key", Message: "missing or incorrect API key: send Authorization: Bearer <key>"})
			return
		}
		next.ServeHTTP(w, r.WithContext(httpapi.WithIdentity(r.Context(), id)))
	})
}

// errNoTokenizer answers when the Generator cannot tokenize (a test double without the ability).
var errNoTokenizer = &Error{Status: http.StatusNotImplemented, Type: "server_error", Code: "not_implemented",
	Message: "this server cannot tokenize"}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	tk, ok := s.gen.(ports.PromptTokenizer)
	if !ok {
		s.fail(w, r, errNoTokenizer)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, addSpecial, err := ParseTokenize(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := tk.Tokenize(r.Context(), req, addSpecial)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TokenizeResponse{Tokens: out.Tokens, Count: len(out.Tokens), MaxModelLen: out.MaxModelLen})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	tk, ok := s.gen.(ports.PromptTokenizer)
	if !ok {
		s.fail(w, r, errNoTokenizer)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	model, ids, err := ParseDetokenize(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	text, err := tk.Detokenize(r.Context(), model, ids)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DetokenizeResponse{Prompt: text, Content: text})
}
