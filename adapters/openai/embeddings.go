package openai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// EmbeddingsBody is a POST /v1/embeddings body in OpenAI's shape.
type EmbeddingsBody struct {
	// Input is a string, an array of strings, an array of token ids, or an array of arrays of token ids.
	Input json.RawMessage `json:"input"`
	Model string          `json:"model"`
	// EncodingFormat is "float" (the default) or "base64" (little-endian float32, as the SDKs decode it).
	EncodingFormat *string `json:"encoding_format"`
	// Dimensions shortens each embedding (Matryoshka models only; app/serve decides).
	Dimensions *int `json:"dimensions"`
	// User is accepted and unused, as OpenAI uses it only for abuse monitoring.
	User *string `json:"user"`
}

// EmbeddingsRequest is a checked /v1/embeddings body.
type EmbeddingsRequest struct {
	Embed  ports.EmbedRequest
	Base64 bool
}

// ParseEmbeddings decodes and checks a /v1/embeddings body.
func ParseEmbeddings(body []byte) (EmbeddingsRequest, error) {
	var b EmbeddingsBody
	if err := decodeJSON(body, &b); err != nil {
		return EmbeddingsRequest{}, err
	}
	if err := checkFields(body, embeddingFields, unrecognized); err != nil {
		return EmbeddingsRequest{}, err
	}
	var req EmbeddingsRequest
	req.Embed.Model = b.Model
	if f := b.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			req.Base64 = true
		default:
			return EmbeddingsRequest{}, badRequest("encoding_format", `encoding_format must be "float" or "base64", not %q`, *f)
		}
	}
	if d := b.Dimensions; d != nil {
		if *d < 1 {
			return EmbeddingsRequest{}, badRequest("dimensions", "dimensions must be at least 1, not %d", *d)
		}
		req.Embed.Dimensions = *d
	}
	inputs, err := parseEmbedInput(b.Input)
	if err != nil {
		return EmbeddingsRequest{}, err
	}
	req.Embed.Inputs = inputs
	return req, nil
}

// parseEmbedInput reads input's four shapes. An empty string, an empty array and an array mixing the
// shapes are refused, as OpenAI refuses them.
func parseEmbedInput(raw json.RawMessage) ([]ports.EmbedInput, error) {
	t := bytes.TrimSpace(raw)
	if isNull(t) {
		return nil, badRequest("input", "input is required: a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	var text string
	if t[0] == '"' {
		if err := json.Unmarshal(t, &text); err != nil {
			return nil, badRequest("input", "input: %v", err)
		}
		if text == "" {
			return nil, badRequest("input", "input must not be an empty string")
		}
		return []ports.EmbedInput{{Text: text}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(t, &items); err != nil {
		return nil, badRequest("input", "input must be a string or an array, not %s", httpapi.JSONKind(jsonKindOf(t)))
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must not be an empty array")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		out := make([]ports.EmbedInput, len(items))
		for i, it := range items {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return nil, badRequest("input", "input[%d] must be a string like input[0]", i)
			}
			if s == "" {
				return nil, badRequest("input", "input[%d] must not be an empty string", i)
			}
			out[i] = ports.EmbedInput{Text: s}
		}
		return out, nil
	case len(first) > 0 && first[0] == '[':
		out := make([]ports.EmbedInput, len(items))
		for i, it := range items {
			var ids []json.RawMessage
			if err := json.Unmarshal(it, &ids); err != nil {
				return nil, badRequest("input", "input[%d] must be an array of token ids like input[0]", i)
			}
			if len(ids) == 0 {
				return nil, badRequest("input", "input[%d] must not be an empty array", i)
			}
			toks, err := tokenIDs(ids, func(j int) string { return "input[" + strconv.Itoa(i) + "][" + strconv.Itoa(j) + "]" })
			if err != nil {
				return nil, err
			}
			out[i] = ports.EmbedInput{Tokens: toks}
		}
		return out, nil
	}
	toks, err := tokenIDs(items, func(j int) string { return "input[" + strconv.Itoa(j) + "]" })
	if err != nil {
		return nil, err
	}
	return []ports.EmbedInput{{Tokens: toks}}, nil
}

// tokenIDs reads an array of non-negative integer token ids; where names an element in messages.
func tokenIDs(items []json.RawMessage, where func(int) string) ([]ports.Token, error) {
	out := make([]ports.Token, len(items))
	for j, it := range items {
		var f float64
		if err := json.Unmarshal(it, &f); err != nil || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
			return nil, badRequest("input", "%s must be a token id (an integer from 0), not %s", where(j), bytes.TrimSpace(it))
		}
		out[j] = ports.Token(f)
	}
	return out, nil
}

// jsonKindOf names the JSON type a value starts as, for messages.
func jsonKindOf(t []byte) string {
	switch t[0] {
	case '{':
		return "map"
	case 't', 'f':
		return "bool"
	case '"':
		return "string"
	case '[':
		return "slice"
	}
	return "float64"
}

// EmbeddingsResponse is OpenAI's embeddings answer.
type EmbeddingsResponse struct {
	Object string          `json:"object"`
	Data   []EmbeddingItem `json:"data"`
	Model  string          `json:"model"`
	Usage  EmbeddingsUsage `json:"usage"`
}

// EmbeddingItem is one input's embedding: a []float32, or a base64 string of its little-endian float32s.
type EmbeddingItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// EmbeddingsUsage counts the tokens run (there is no output).
type EmbeddingsUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// EmbeddingsOf builds the answer to a request from its result.
func EmbeddingsOf(res ports.EmbedResult, b64 bool) EmbeddingsResponse {
	out := EmbeddingsResponse{Object: "list", Data: make([]EmbeddingItem, len(res.Embeddings)), Model: res.Model,
		Usage: EmbeddingsUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	for i, e := range res.Embeddings {
		var v any = e
		if b64 {
			v = Base64Floats(e)
		}
		out.Data[i] = EmbeddingItem{Object: "embedding", Index: i, Embedding: v}
	}
	return out
}

// Base64Floats is v as little-endian float32 bytes in standard base64, the encoding OpenAI's SDKs decode
// (numpy.frombuffer(..., dtype="float32") in Python, a Float32Array over the bytes in Node).
func Base64Floats(v []float32) string {
	buf := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

// errNoEmbedder answers when the Generator cannot embed (a test double without the ability).
var errNoEmbedder = &Error{Status: http.StatusNotImplemented, Type: "server_error", Code: "not_implemented",
	Message: "this server cannot embed"}

// embeddings serves POST /v1/embeddings.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	em, ok := s.gen.(ports.TextEmbedder)
	if !ok {
		s.fail(w, r, errNoEmbedder)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, err := ParseEmbeddings(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req.Embed.ID = "embd-" + s.opts.NewID()
	req.Embed.Tenant = httpapi.IdentityOf(r.Context()).Tenant
	ctx := r.Context()
	if s.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
	}
	res, err := em.Embed(ctx, req.Embed)
	if err != nil {
		if httpapi.ClientGone(r) && errors.Is(err, context.Canceled) {
			s.cancelled(w, r, err, start, false)
			return
		}
		s.fail(w, r, httpapi.Cause(ctx, err))
		return
	}
	writeJSON(w, http.StatusOK, EmbeddingsOf(res, req.Base64))
}
