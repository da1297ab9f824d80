// Package responses serves OpenAI's Responses API, POST /v1/responses, on top of the chat completions path
// of adapters/openai: a Responses body is translated into the chat completions body it means and checked
// by openai.ParseChat, the generation's result is written back as a response or as its stream of events.
// The route is registered on the openai.Server's host with its guards (openai.Server.Work).
package responses
