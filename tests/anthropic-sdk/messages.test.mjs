// The official Anthropic TypeScript SDK drives a real higgsd serving the bundled demo model and drafter
// (models/demo): plain and streamed messages, stop sequences, a tool-use round trip, thinking, token
// counting, errors, forced tool calls, structured outputs and the beta tool runner. make test runs it with HIGGSD pointing at the freshly built binary.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const higgsd = path.resolve(repoRoot, process.env.HIGGSD ?? 'bin/higgsd');
const apiKey = 'sdk-test-key';
const model = 'demo';

let proc;
let client;

// higgsd is started on a free port; its JSON log says where it listens and when the models are loaded.
// A fixed block size (--adaptive=false) keeps the drafter in use whatever the machine's speed, so that the
// speculative path is what the SDK sees.
before(async () => {
  // The small demo, named explicitly (the default bundled model is larger and slower): this test is about the API.
  proc = spawn(higgsd, ['--port', '0', '--api-key', apiKey, '--log-format', 'json', '--queue-size', '4',
    '--model', 'models/demo/target', '--draft', 'models/demo/drafter', '--served-model-name', 'demo',
    '--adaptive=false', '--block-size', '4'], {
    cwd: repoRoot,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('higgsd did not report "serving" within 60 s')), 60_000);
    proc.on('exit', (code) => reject(new Error(`higgsd exited with status ${code} before serving`)));
    createInterface({ input: proc.stderr }).on('line', (line) => {
      let rec;
      try { rec = JSON.parse(line); } catch { return; }
      if (rec.message === 'serving') {
        clearTimeout(timer);
        resolve(rec.addr);
      }
    });
  });
  client = new Anthropic({ baseURL: `http://${addr}`, apiKey, maxRetries: 0, timeout: 60_000 });
});

after(() => {
  proc?.kill('SIGTERM');
});

const user = (text) => [{ role: 'user', content: text }];

test('plain message: one text block, stop reason, usage with the speculative figures', async () => {
  const msg = await client.messages.create({
    model, max_tokens: 24, temperature: 0, messages: user('package main\n\nimport "fmt"\n'),
  });
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, model);
  assert.match(msg.id, /^msg_/);
  assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), msg.stop_reason);
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0].type, 'text');
  assert.ok(msg.content[0].text.length > 0);
  assert.ok(msg.usage.input_tokens > 0);
  assert.ok(msg.usage.output_tokens > 0 && msg.usage.output_tokens <= 24);
  assert.ok(msg.usage.speculative.rounds > 0, 'usage.speculative is reported');
  assert.ok(msg._request_id?.startsWith('req_'), 'request-id header');
});

test('greedy output is the same with speculation on and off (block_size 1)', async () => {
  const params = { model, max_tokens: 32, temperature: 0, messages: user('func (s *Server) Close() error {') };
  const spec = await client.messages.create(params);
  const plain = await client.messages.create({ ...params, block_size: 1 });
  assert.equal(spec.content[0].text, plain.content[0].text);
  assert.ok(spec.usage.speculative.draft_tokens > 0, 'the drafter was used');
  assert.equal(plain.usage.speculative.draft_tokens, 0);
});

test('streamed message: the event sequence and the same text as unstreamed', async () => {
  const params = { model, max_tokens: 24, temperature: 0, messages: user('type Reader interface {') };
  const whole = await client.messages.create(params);
  const stream = client.messages.stream(params);
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta') {
      assert.equal(ev.delta.type, 'text_delta');
      text += ev.delta.text;
    }
  }
  const final = await stream.finalMessage();
  // The SDK hides ping events; the wire has one right after message_start.
  assert.deepEqual(types.slice(0, 2), ['message_start', 'content_block_start']);
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  const raw = await fetch(`${client.baseURL}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...params, stream: true }),
  });
  assert.equal(raw.headers.get('content-type'), 'text/event-stream');
  const names = (await raw.text()).split('\n').filter((l) => l.startsWith('event: ')).map((l) => l.slice(7));
  assert.deepEqual(names.slice(0, 3), ['message_start', 'ping', 'content_block_start']);
  assert.deepEqual(names.slice(3, -3), Array(names.length - 6).fill('content_block_delta'));
  assert.deepEqual(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(text, whole.content[0].text);
  assert.equal(final.content[0].text, whole.content[0].text);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.ok(final.usage.input_tokens > 0, 'message_start carries the prompt tokens');
});

test('stop_sequences: stop_reason stop_sequence, the sequence named, the text cut before it', async () => {
  const params = { model, max_tokens: 48, temperature: 0, messages: user('func main() {') };
  const free = await client.messages.create(params);
  const text = free.content[0].text;
  assert.ok(text.length > 8, `the demo answered ${JSON.stringify(text)}`);
  const stop = text.slice(4, 7);
  const msg = await client.messages.create({ ...params, stop_sequences: ['\u0000never', stop] });
  assert.equal(msg.stop_reason, 'stop_sequence');
  assert.equal(msg.stop_sequence, stop);
  assert.equal(msg.content[0].text, text.slice(0, text.indexOf(stop)));
});

const tools = [{
  name: 'go_doc',
  description: 'Show the documentation of a Go package',
  input_schema: { type: 'object', properties: { pkg: { type: 'string' } }, required: ['pkg'] },
}];

test('tool use round trip: tools offered, a tool_use / tool_result history answered', async () => {
  const first = await client.messages.create({
    model, max_tokens: 16, temperature: 0, tools, tool_choice: { type: 'auto' }, messages: user('package fmt'),
  });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(first.stop_reason));
  const history = [
    { role: 'user', content: 'What does package io do?' },
    { role: 'assistant', content: [
      { type: 'text', text: 'Let me look.' },
      { type: 'tool_use', id: 'toolu_1', name: 'go_doc', input: { pkg: 'io' } },
    ] },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: 'Package io provides basic interfaces to I/O primitives.' },
      { type: 'text', text: 'Summarise.' },
    ] },
  ];
  const msg = await client.messages.create({ model, max_tokens: 16, temperature: 0, tools, messages: history });
  assert.equal(msg.type, 'message');
  const count = await client.messages.countTokens({ model, tools, messages: history });
  assert.equal(count.input_tokens, msg.usage.input_tokens, 'count_tokens counts the prompt the message ran on');

  // A tool_result that answers no tool_use is refused.
  await assert.rejects(client.messages.create({
    model, max_tokens: 4, tools, messages: [history[0], history[1],
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_9', content: 'x' }] }],
  }), (err) => err instanceof Anthropic.BadRequestError && /toolu_9/.test(err.message));
  // A forced call of a tool that is not offered is a clear 400.
  await assert.rejects(client.messages.create({ model, max_tokens: 4, tools, tool_choice: { type: 'tool', name: 'nope' }, messages: user('x') }),
    (err) => err instanceof Anthropic.BadRequestError && err.error?.error?.type === 'invalid_request_error' &&
      /nope/.test(err.message));
});

test('thinking: enabled with a budget, and thinking blocks in the history', async () => {
  const msg = await client.messages.create({
    model, max_tokens: 1100, temperature: 1, thinking: { type: 'enabled', budget_tokens: 1024 },
    stop_sequences: ['}'], messages: user('func f() {'),
  });
  assert.equal(msg.type, 'message');
  // The demo is no reasoning model: no <think> in its output, so no thinking block either.
  assert.ok(msg.content.every((b) => b.type === 'text'));
  const again = await client.messages.create({
    model, max_tokens: 8, temperature: 0, messages: [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: '' }, { type: 'text', text: 'b' }] },
      { role: 'user', content: 'c' },
    ],
  });
  assert.equal(again.type, 'message');
  await assert.rejects(client.messages.create({
    model, max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 10 }, messages: user('x'),
  }), (err) => err instanceof Anthropic.BadRequestError && /budget_tokens/.test(err.message));
});

test('errors: Anthropic shape and status codes', async () => {
  const cases = [
    [{ model, messages: user('x') }, Anthropic.BadRequestError, /max_tokens: field required/],
    [{ model, max_tokens: 0, messages: user('x') }, Anthropic.BadRequestError, /max_tokens/],
    [{ model, max_tokens: 5000, messages: user('x') }, Anthropic.BadRequestError, /max.tokens \d+ is too large: .*context length/],
    [{ model, max_tokens: 4, temperature: 1.5, messages: user('x') }, Anthropic.BadRequestError, /temperature/],
    [{ model, max_tokens: 4, messages: [] }, Anthropic.BadRequestError, /messages/],
    [{ model, max_tokens: 4, messages: user('x'), frobnicate: 1 }, Anthropic.BadRequestError, /frobnicate: Extra inputs are not permitted/],
    [{ model, max_tokens: 4, messages: user('x'), mcp_servers: [{ type: 'url', url: 'https://example.com/mcp', name: 'x' }] },
      Anthropic.BadRequestError, /mcp_servers: not supported by this server/],
    [{ model: 'claude-nope', max_tokens: 4, messages: user('x') }, Anthropic.NotFoundError, /claude-nope/],
  ];
  for (const [params, cls, re] of cases) {
    await assert.rejects(client.messages.create(params), (err) => {
      assert.ok(err instanceof cls, `${JSON.stringify(params)}: got ${err.constructor.name} ${err.message}`);
      assert.match(err.message, re);
      assert.equal(err.error.type, 'error');
      assert.ok(err.requestID?.startsWith('req_'));
      return true;
    });
  }
  const wrong = new Anthropic({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model, max_tokens: 4, messages: user('x') }),
    (err) => err instanceof Anthropic.AuthenticationError && err.error.error.type === 'authentication_error');
  // The key is also taken as a Bearer token (ANTHROPIC_AUTH_TOKEN), the scheme in any case.
  const bearer = new Anthropic({ baseURL: client.baseURL, apiKey: null, authToken: apiKey, maxRetries: 0 });
  const ok = await bearer.messages.create({ model, max_tokens: 2, messages: user('x') });
  assert.equal(ok.type, 'message');
});

const weather = {
  name: 'get_weather', description: 'Weather at a place', strict: true,
  input_schema: {
    type: 'object', additionalProperties: false, required: ['city', 'unit'],
    properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
  },
};

// checkWeather holds an input to weather's schema (the test's own check, independent of higgs's grammar).
const checkWeather = (input) => {
  assert.deepEqual(Object.keys(input).sort(), ['city', 'unit']);
  assert.equal(typeof input.city, 'string');
  assert.ok([...input.city].length <= 12, input.city);
  assert.ok(['celsius', 'fahrenheit'].includes(input.unit), input.unit);
};

test('forced tool call: tool_choice tool gives a tool_use block valid under the strict schema, streamed alike', async () => {
  const params = {
    model, max_tokens: 120, temperature: 0, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    messages: user('What is the weather in Paris?'),
  };
  const msg = await client.messages.create(params);
  assert.equal(msg.stop_reason, 'tool_use');
  const uses = msg.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, 'get_weather');
  checkWeather(uses[0].input);
  assert.ok(msg.usage.speculative.draft_tokens > 0, 'speculation stayed on');

  const final = await client.messages.stream(params).finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual(final.content.filter((b) => b.type === 'tool_use')[0].input, uses[0].input);

  const any = await client.messages.create({ ...params, tool_choice: { type: 'any', disable_parallel_tool_use: true } });
  assert.equal(any.stop_reason, 'tool_use');
  checkWeather(any.content.find((b) => b.type === 'tool_use').input);
});

test('structured output: output_config.format json_schema, and a 400 naming an unsupported keyword', async () => {
  const msg = await client.messages.create({
    model, max_tokens: 120, temperature: 0, messages: user('Weather in Paris as JSON'),
    output_config: { format: { type: 'json_schema', schema: weather.input_schema } },
  });
  assert.equal(msg.stop_reason, 'end_turn');
  checkWeather(JSON.parse(msg.content[0].text));
  await assert.rejects(
    client.messages.create({
      model, max_tokens: 8, messages: user('x'),
      output_config: { format: { type: 'json_schema', schema: { type: 'string', pattern: '^a' } } },
    }),
    (err) => err instanceof Anthropic.BadRequestError && /pattern/.test(err.message));
});

// The tool runner, as the SDK sets it up, runs over a message thread (server-held state, the `thread` field).
// higgsd holds none: it refuses the field with the error details the SDK reads as "this server cannot thread
// the request" (thread_unsupported_request), and the runner goes on without a thread, sending the full
// history each turn. Before, `thread` was refused as an extra input and the runner failed on its first turn.
test('beta tool runner: the thread is refused as the SDK expects, and the loop runs unthreaded', async () => {
  const sent = [];
  const recorder = new Anthropic({
    baseURL: client.baseURL, apiKey, maxRetries: 0, timeout: 60_000,
    fetch: async (url, init) => {
      sent.push(JSON.parse(init.body));
      return fetch(url, init);
    },
  });
  const calls = [];
  const runner = recorder.beta.messages.toolRunner({
    model, max_tokens: 120, temperature: 0, max_iterations: 2,
    tools: [betaTool({
      name: weather.name, description: weather.description, strict: true, inputSchema: weather.input_schema,
      run: (input) => { calls.push(input); return `18 degrees ${input.unit}`; },
    })],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    messages: user('What is the weather in Paris?'),
  });
  const final = await runner.runUntilDone();
  assert.equal(final.type, 'message');
  assert.equal(calls.length, 2, 'the tool ran once per turn');
  calls.forEach(checkWeather);

  assert.deepEqual(sent[0].thread, { type: 'create' }, 'the runner asks for a thread first');
  const rest = sent.slice(1);
  assert.equal(rest.length, 2, 'the refused turn is sent again, then one more turn');
  for (const body of rest) assert.equal(body.thread, undefined, 'no thread after the refusal');
  // Unthreaded, the second turn carries the whole history: question, tool_use, tool_result.
  const history = rest[1].messages;
  assert.equal(history.length, 3);
  assert.equal(history[1].content.find((b) => b.type === 'tool_use').name, 'get_weather');
  assert.equal(history[2].content[0].type, 'tool_result');

  // A thread the caller starts itself cannot go on unthreaded: the refusal reaches it, in Anthropic's shape.
  const thread = recorder.beta.messages.thread({ model, max_tokens: 4 });
  await assert.rejects(thread.send({ role: 'user', content: 'x' }), (err) => {
    assert.ok(err instanceof Anthropic.BadRequestError, `${err.constructor.name} ${err.message}`);
    assert.match(err.message, /thread: not supported by this server/);
    assert.equal(err.error.error.details.error_code, 'thread_unsupported_request');
    return true;
  });
});
