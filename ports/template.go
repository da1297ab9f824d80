package ports

// ChatMessage is one turn of a conversation in the OpenAI shape. Raw carries the message exactly as the
// client sent it (JSON object), so templates can read fields this struct does not name (tool_calls,
// reasoning_content, name…) with their key order preserved.
type ChatMessage struct {
	Role    string
	Content string
	// Raw is the message's original JSON object; may be nil for messages built in code.
	Raw []byte
}

// ChatOptions are the template switches a request may set.
type ChatOptions struct {
	AddGenerationPrompt bool
	// EnableThinking nil means the model family's default.
	EnableThinking *bool
	// Tools is the raw JSON array of tool definitions; nil when none.
	Tools []byte
}

// ChatTemplate renders a conversation into the prompt text the model was trained on. Safe for concurrent use.
type ChatTemplate interface {
	Render(messages []ChatMessage, opts ChatOptions) (string, error)
}
