// The official OpenAI TypeScript SDK drives a real higgsd serving the bundled demo model and drafter
// (models/demo): chat completions plain and streamed (the SDK's stream helper), logprobs, a forced tool call,
// the runTools loop, structured outputs through chat.completions.parse, the Responses API (create, the stream
// helper, a function call) and errors. make test runs it with HIGGSD pointing at the freshly built binary.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const higgsd = path.resolve(repoRoot, process.env.HIGGSD ?? 'bin/higgsd');
const apiKey = 'sdk-test-key';
const model = 'demo';

let proc;
let client;

// As in tests/anthropic-sdk: higgsd on a free port, its JSON log says where it listens; a fixed block size keeps
// the drafter in use whatever the machine's speed.
before(async () => {
  proc = spawn(higgsd, ['--port', '0', '--api-key', apiKey, '--log-format', 'json', '--queue-size', '4',
    '--model', 'models/demo/target', '--draft', 'models/demo/drafter', '--served-model-name', model,
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
  client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
});

after(() => {
  proc?.kill('SIGTERM');
});

const user = (text) => [{ role: 'user', content: text }];

test('chat completion: one choice, finish reason, usage with the speculative figures', async () => {
  const c = await client.chat.completions.create({
    model, max_tokens: 24, temperature: 0, messages: user('package main\n\nimport "fmt"\n'),
  });
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.model, model);
  assert.match(c.id, /^chatcmpl-/);
  assert.equal(c.choices.length, 1);
  assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason), c.choices[0].finish_reason);
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.ok(c.choices[0].message.content.length > 0);
  assert.ok(c.usage.prompt_tokens > 0);
  assert.ok(c.usage.completion_tokens > 0 && c.usage.completion_tokens <= 24);
  assert.ok(c.usage.speculative.rounds > 0, 'usage.speculative is reported');
});

test('greedy output is the same with speculation on and off (block_size 1), streamed alike', async () => {
  const params = { model, max_tokens: 32, temperature: 0, messages: user('func (s *Server) Close() error {') };
  const spec = await client.chat.completions.create(params);
  const plain = await client.chat.completions.create({ ...params, block_size: 1 });
  assert.equal(spec.choices[0].message.content, plain.choices[0].message.content);
  assert.ok(spec.usage.speculative.draft_tokens > 0, 'the drafter was used');
  assert.equal(plain.usage.speculative.draft_tokens, 0);

  const stream = client.chat.completions.stream({ ...params, stream_options: { include_usage: true } });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  const final = await stream.finalChatCompletion();
  assert.equal(text, spec.choices[0].message.content);
  assert.equal(final.choices[0].message.content, spec.choices[0].message.content);
  assert.equal(final.choices[0].finish_reason, spec.choices[0].finish_reason);
});

test('logprobs: one entry per token, the same with and without the drafter', async () => {
  const params = { model, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, messages: user('type T struct {') };
  const spec = await client.chat.completions.create(params);
  const plain = await client.chat.completions.create({ ...params, block_size: 1 });
  const lp = spec.choices[0].logprobs.content;
  assert.equal(lp.length, spec.usage.completion_tokens);
  for (const e of lp) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token, 'greedy: the chosen token is the most likely');
  }
  assert.deepEqual(lp.map((e) => e.token), plain.choices[0].logprobs.content.map((e) => e.token));
  lp.forEach((e, i) => assert.ok(Math.abs(e.logprob - plain.choices[0].logprobs.content[i].logprob) < 1e-4));
});

const weather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather at a place', strict: true,
    parameters: {
      type: 'object', additionalProperties: false, required: ['city', 'unit'],
      properties: { city: { type: 'string', maxLength: 12 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
    },
  },
};

const checkWeather = (args) => {
  assert.deepEqual(Object.keys(args).sort(), ['city', 'unit']);
  assert.equal(typeof args.city, 'string');
  assert.ok([...args.city].length <= 12, args.city);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit), args.unit);
};

test('forced tool call: finish_reason tool_calls, arguments valid under the strict schema, streamed alike', async () => {
  const params = {
    model, max_tokens: 120, temperature: 0, tools: [weather], tool_choice: 'required', parallel_tool_calls: false,
    messages: user('What is the weather in Paris?'),
  };
  const c = await client.chat.completions.create(params);
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  const calls = c.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'get_weather');
  checkWeather(JSON.parse(calls[0].function.arguments));
  assert.ok(!(c.choices[0].message.content ?? '').includes('<tool'), 'no tag reaches content');

  const final = await client.chat.completions.stream(params).finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(final.choices[0].message.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]),
    calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]));
});

test('runTools: the SDK runs the tool and sends its result back, turn after turn', async () => {
  const ran = [];
  const runner = client.chat.completions.runTools({
    model, max_tokens: 120, temperature: 0, tool_choice: 'required', parallel_tool_calls: false,
    messages: user('What is the weather in Paris?'),
    tools: [{
      type: 'function',
      function: {
        ...weather.function,
        parse: JSON.parse,
        function: (args) => { ran.push(args); return `18 degrees ${args.unit}`; },
      },
    }],
  }, { maxChatCompletions: 2 });
  await runner.done();
  assert.equal(ran.length, 2, 'the tool ran once per completion');
  ran.forEach(checkWeather);
  const msgs = runner.messages;
  assert.ok(msgs.some((m) => m.role === 'tool' && /18 degrees/.test(m.content)), 'the tool result went back');
});

test('structured output: chat.completions.parse with a json_schema response_format', async () => {
  const c = await client.chat.completions.parse({
    model, max_tokens: 120, temperature: 0, messages: user('Weather in Paris as JSON'),
    response_format: { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema: weather.function.parameters } },
  });
  assert.equal(c.choices[0].finish_reason, 'stop');
  checkWeather(c.choices[0].message.parsed);
});

test('responses: create and the stream helper give the same output text', async () => {
  const params = { model, max_output_tokens: 24, temperature: 0, instructions: 'Write Go.', input: 'type Reader interface {' };
  const r = await client.responses.create(params);
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  assert.ok(r.output_text.length > 0);
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);

  const stream = client.responses.stream(params);
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
  assert.equal(text, r.output_text);
  assert.equal(final.output_text, r.output_text);
});

test('responses: a forced function call, then its output sent back as input items', async () => {
  const tool = { type: 'function', ...weather.function };
  const r = await client.responses.create({
    model, max_output_tokens: 120, temperature: 0, tools: [tool], tool_choice: 'required', parallel_tool_calls: false,
    input: 'What is the weather in Paris?',
  });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  checkWeather(JSON.parse(call.arguments));
  const next = await client.responses.create({
    model, max_output_tokens: 16, temperature: 0, tools: [tool],
    input: [
      { role: 'user', content: 'What is the weather in Paris?' },
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: '18 degrees' },
    ],
  });
  assert.equal(next.object, 'response');
});

test('errors: OpenAI shape and status codes', async () => {
  const cases = [
    [() => client.chat.completions.create({ model, max_tokens: 4, messages: user('x'), frobnicate: 1 }),
      OpenAI.BadRequestError, /Unrecognized request argument supplied: frobnicate/, 'frobnicate'],
    [() => client.chat.completions.create({ model, max_tokens: 4, temperature: 9, messages: user('x') }),
      OpenAI.BadRequestError, /temperature/, 'temperature'],
    [() => client.chat.completions.create({ model, max_tokens: 4, messages: [] }), OpenAI.BadRequestError, /messages/, 'messages'],
    [() => client.responses.create({ model, max_output_tokens: 4, input: 'x', frobnicate: 1 }),
      OpenAI.BadRequestError, /Unknown parameter: 'frobnicate'/, 'frobnicate'],
    [() => client.responses.create({ model, input: 'x', store: true }), OpenAI.BadRequestError, /store/, 'store'],
    [() => client.chat.completions.create({ model: 'gpt-nope', max_tokens: 4, messages: user('x') }), OpenAI.NotFoundError, /gpt-nope/, undefined],
  ];
  for (const [call, cls, re, param] of cases) {
    await assert.rejects(call(), (err) => {
      assert.ok(err instanceof cls, `got ${err.constructor.name} ${err.message}`);
      assert.match(err.message, re);
      if (param !== undefined) assert.equal(err.param, param);
      return true;
    });
  }
  const wrong = new OpenAI({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.chat.completions.create({ model, max_tokens: 4, messages: user('x') }),
    (err) => err instanceof OpenAI.AuthenticationError);
});

test('models: the served model is listed', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes(model), JSON.stringify(ids));
});
