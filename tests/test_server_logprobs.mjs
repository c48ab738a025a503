// test_server_logprobs.mjs - logprob tokens through the official `openai` npm
// client against a running `vllmc serve` (stories260K, served as "tiny"):
// OpenAI's contract that the tokens' bytes concatenate to the text.
//   node tests/test_server_logprobs.mjs BASE_URL
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(new URL("./ref/package.json", import.meta.url));
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);
const client = new OpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const check = (name, cond, why) => console.log(cond ? `ok ${name}` : `FAIL ${name}: ${why}`);
const utf8 = (bytes) => Buffer.from(bytes).toString("utf8");
const messages = [{ role: "user", content: "Once upon a time" }];

try {
  const r = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 2 });
  const c = r.choices[0], lp = c.logprobs.content;
  const joined = utf8(lp.flatMap((t) => t.bytes));
  check("node_chat_bytes_concat", joined === c.message.content && lp.every((t) => t.top_logprobs.length === 2 && utf8(t.bytes) === t.token),
        `bytes make ${JSON.stringify(joined)}, content ${JSON.stringify(c.message.content)}`);
} catch (e) { check("node_chat_bytes_concat", false, `${e?.constructor?.name}: ${e?.message}`); }

try {
  const s = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 24, temperature: 0, logprobs: true, stream: true });
  let text = "", bytes = [];
  for await (const ch of s) {
    for (const c of ch.choices) {
      text += c.delta?.content ?? "";
      for (const t of c.logprobs?.content ?? []) bytes.push(...t.bytes);
    }
  }
  check("node_chat_stream_bytes_concat", text.length > 10 && utf8(bytes) === text, `bytes make ${JSON.stringify(utf8(bytes))}, text ${JSON.stringify(text)}`);
} catch (e) { check("node_chat_stream_bytes_concat", false, `${e?.constructor?.name}: ${e?.message}`); }

try {
  const r = await client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 24, temperature: 0, logprobs: 1 });
  const c = r.choices[0], lp = c.logprobs;
  const chars = [...c.text];
  const bad = lp.tokens.findIndex((t, i) => chars.slice(lp.text_offset[i], lp.text_offset[i] + [...t].length).join("") !== t);
  check("node_completion_offsets", lp.tokens.join("") === c.text && bad < 0, `token ${bad}: ${JSON.stringify(lp.tokens[bad])} at ${lp.text_offset[bad]} of ${JSON.stringify(c.text)}`);
} catch (e) { check("node_completion_offsets", false, `${e?.constructor?.name}: ${e?.message}`); }
