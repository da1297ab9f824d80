package serve

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// schemaSuite is the committed test schemas (adapters/grammar/testdata/schemas).
func schemaSuite(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "adapters", "grammar", "testdata", "schemas", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 30)
	out := map[string][]byte{}
	for _, p := range paths {
		doc, err := os.ReadFile(p)
		require.NoError(t, err)
		out[filepath.Base(p)] = doc
	}
	return out
}

// validator compiles doc with an independent JSON Schema implementation (santhosh-tekuri/jsonschema).
func validator(t *testing.T, doc []byte) func(string) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("urn:test", v))
	s, err := c.Compile("urn:test")
	require.NoError(t, err)
	return func(text string) error {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return err
		}
		return s.Validate(inst)
	}
}

func constrainedServe(t *testing.T, m *models.Models) *Serve {
	t.Helper()
	// A fixed block size (no adaptive policy), so every request really speculates.
	s, err := NewServe(ServeConfig{ServedModelName: "demo", MaxConcurrency: 1, QueueSize: 4}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(EngineFromModels(m)))
	return s
}

// TestConstrainedSchemaSuite runs every committed schema on the demo models (CPU backend): the greedy
// output with speculation (blocks of 16 and 4) equals the output without, token for token, and the
// independent validator accepts it.
func TestConstrainedSchemaSuite(t *testing.T) {
	m := loadDemo(t, 0)
	s := constrainedServe(t, m)
	valid := 0
	for name, doc := range schemaSuite(t) {
		t.Run(name, func(t *testing.T) {
			check := validator(t, doc)
			var outs []string
			for _, bs := range []int{1, 16, 4} {
				res, err := s.Generate(t.Context(), ports.GenerateRequest{
					Prompt: "// Config is the JSON configuration.\nvar config = `", MaxTokens: 200, BlockSize: bs,
					Constraint: &ports.Constraint{Kind: ports.ConstrainJSONSchema, Schema: doc, Param: "response_format"},
				}, nil)
				require.NoError(t, err)
				if bs > 1 {
					assert.Positive(t, res.Spec.Rounds, "speculation ran")
				}
				require.Equal(t, "stop", res.FinishReason, "the constrained output ended: %q", res.Content)
				outs = append(outs, res.Content)
			}
			assert.Equal(t, outs[0], outs[1], "block 16")
			assert.Equal(t, outs[0], outs[2], "block 4")
			if assert.NoError(t, check(outs[0]), "%s", outs[0]) {
				valid++
			}
		})
	}
	assert.GreaterOrEqual(t, valid, 30)
}

// TestConstrainedSeededSampling: seeded sampling under a constraint gives the same text with and without
// speculation (sample-and-match on masked distributions), and the text is valid.
func TestConstrainedSeededSampling(t *testing.T) {
	m := loadDemo(t, 0)
	s := constrainedServe(t, m)
	doc := schemaSuite(t)["34_tool_arguments.json"]
	check := validator(t, doc)
	seed := uint64(7)
	for _, temp := range []float64{0.7, 1} {
		var outs []string
		for _, bs := range []int{1, 16} {
			res, err := s.Generate(t.Context(), ports.GenerateRequest{
				Prompt: "func main() {\n\tcfg := `", MaxTokens: 200, BlockSize: bs, Seed: &seed,
				Sampling:   ports.SamplingParams{Temperature: temp},
				Constraint: &ports.Constraint{Kind: ports.ConstrainJSONSchema, Schema: doc},
			}, nil)
			require.NoError(t, err)
			require.Equal(t, "stop", res.FinishReason, "%q", res.Content)
			outs = append(outs, res.Content)
		}
		assert.Equal(t, outs[0], outs[1])
		assert.NoError(t, check(outs[0]), outs[0])
	}
}

// TestConstrainedForcedToolCall: a forced call of a named tool is a well-formed Hermes call the parser
// reads, with arguments valid under the tool's schema, speculation on and off alike.
func TestConstrainedForcedToolCall(t *testing.T) {
	m := loadDemo(t, 0)
	s := constrainedServe(t, m)
	params := schemaSuite(t)["34_tool_arguments.json"]
	check := validator(t, params)
	var outs []string
	for _, bs := range []int{1, 16} {
		res, err := s.Generate(t.Context(), ports.GenerateRequest{
			Messages:  []ports.ChatMessage{{Role: "user", Content: "What is the weather in Paris?"}},
			MaxTokens: 200, BlockSize: bs,
			Constraint: &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice",
				Tools: []ports.ConstraintTool{{Name: "get_weather", Parameters: params, Strict: true}, {Name: "now"}}},
		}, nil)
		require.NoError(t, err)
		require.Equal(t, "stop", res.FinishReason, "%q", res.Content)
		outs = append(outs, res.Content)
	}
	assert.Equal(t, outs[0], outs[1])
	rest, calls := toolcall.Parse(outs[0], nil)
	require.NotEmpty(t, calls, "%q", outs[0])
	assert.Empty(t, strings.TrimSpace(rest))
	for _, c := range calls {
		switch c.Name {
		case "get_weather":
			assert.NoError(t, check(c.Arguments))
		case "now":
			assert.JSONEq(t, `{}`, c.Arguments)
		default:
			t.Fatalf("call of %q", c.Name)
		}
	}
}

// TestConstraintErrorsNameTheKeyword: a schema outside the subset is a request error naming its field and
// the keyword.
func TestConstraintErrorsNameTheKeyword(t *testing.T) {
	m := loadDemo(t, 0)
	s := constrainedServe(t, m)
	_, err := s.Generate(t.Context(), ports.GenerateRequest{Prompt: "x", MaxTokens: 4,
		Constraint: &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format",
			Schema: []byte(`{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}`)}}, nil)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "response_format", re.Param)
	assert.Contains(t, re.Message, "pattern")
	_, err = s.Generate(t.Context(), ports.GenerateRequest{Prompt: "x", MaxTokens: 4,
		Constraint: &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tools",
			Tools: []ports.ConstraintTool{{Name: "f", Strict: true, Parameters: []byte(`{"type":"object","oneOf":[]}`)}}}}, nil)
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "oneOf")
}
