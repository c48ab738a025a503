// test_server_openai.mjs - drives a running `vllmc serve` (stories260K, served
// as "tiny") with the official `openai` npm client, a client nobody here wrote.
//   node tests/test_server_openai.mjs BASE_URL
// Expected greedy tokens come from models/stories260K/reference_bos_greedy200.json
// (llama2.c's run.c at temperature 0): greedy decoding from [BOS] + ref[0:k]
// must continue with ref[k:], whatever else shares the batch.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const require = createRequire(new URL("./ref/package.json", import.meta.url));
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);

const base = process.argv[2];
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

process.exit(failed ? 1 : 0);
