// The official openai SDK against agentd's OpenAI-compatible gateway. Run by TestInteropOpenAISDK
// (gateway_openai_test.go) with AGENTD_URL and AGENTD_TOKEN set, on the npm Node 22 binary; the server
// has agents gw-plain (no tools) and gw-tools (a shell tool) on a scripted model.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const sdkVersion = JSON.parse(readFileSync(new URL("./node_modules/openai/package.json", import.meta.url))).version;

const client = new OpenAI({
  apiKey: process.env.AGENTD_TOKEN,
  baseURL: process.env.AGENTD_URL + "/openai/v1",
  maxRetries: 0,
});

// 1. The agents are the models.
const ids = [];
for await (const m of client.models.list()) {
  assert.equal(m.object, "model");
  assert.equal(m.owned_by, "agentd");
  assert.equal(typeof m.created, "number");
  ids.push(m.id);
}
assert.ok(ids.includes("gw-plain") && ids.includes("gw-tools"), `models: ${ids}`);

// 2. Not streamed, with history.
const c = await client.chat.completions.create({
  model: "gw-plain",
  messages: [
    { role: "system", content: "be brief" },
    { role: "user", content: "earlier" },
    { role: "assistant", content: "noted" },
    { role: "user", content: "hi there" },
  ],
  temperature: 0.1,
});
assert.equal(c.object, "chat.completion");
assert.match(c.id, /^chatcmpl-/);
assert.equal(c.model, "gw-plain");
assert.equal(c.choices.length, 1);
assert.equal(c.choices[0].message.role, "assistant");
assert.equal(c.choices[0].message.content, "Hello, hi there");
assert.equal(c.choices[0].finish_reason, "stop");
assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
assert.ok(c.usage.total_tokens > 0);

// 3. Streamed, with include_usage.
const stream = await client.chat.completions.create({
  model: "gw-plain",
  messages: [{ role: "user", content: "stream please" }],
  stream: true,
  stream_options: { include_usage: true },
});
let text = "", finish = null, usage = null, first = true, id = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  assert.equal(chunk.object, "chat.completion.chunk");
  id ??= chunk.id;
  assert.equal(chunk.id, id, "one id for every chunk");
  if (chunk.choices.length === 0) {
    usage = chunk.usage;
    continue;
  }
  const ch = chunk.choices[0];
  if (first) {
    assert.equal(ch.delta.role, "assistant");
    first = false;
  }
  text += ch.delta.content ?? "";
  if (ch.finish_reason) finish = ch.finish_reason;
}
assert.equal(text, "Hello, stream please");
assert.equal(finish, "stop");
assert.ok(usage && usage.prompt_tokens > 0 && usage.completion_tokens > 0, `usage ${JSON.stringify(usage)}`);

// 4. A tool-using agent, through the SDK's stream helper (it assembles the chunks itself).
const runner = client.chat.completions.stream({
  model: "gw-tools",
  messages: [{ role: "user", content: "use the tool" }],
  stream_options: { include_usage: true },
});
const final = await runner.finalChatCompletion();
const answer = final.choices[0].message.content;
assert.match(answer, /The tool said forty-two/);
assert.equal(final.choices[0].finish_reason, "stop");
assert.ok(final.usage.total_tokens > 0);

// 5. Errors arrive as the SDK's typed errors.
await assert.rejects(
  client.chat.completions.create({ model: "no-such-agent", messages: [{ role: "user", content: "x" }] }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found",
);
const bad = new OpenAI({ apiKey: "wrong-token", baseURL: client.baseURL, maxRetries: 0 });
await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);

console.log(`openai interop: ok (openai SDK ${sdkVersion}, node ${process.version}, ${ids.length} models, ${chunks} chunks, tool answer ${JSON.stringify(answer)})`);
