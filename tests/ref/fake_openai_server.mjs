// fake_openai_server.mjs - a TEST FIXTURE for `vllmc bench serve`, not a model
// server: it streams a known number of chunks with known delays, so the
// benchmark's counting and timing can be checked against what was sent.
//
//   node tests/ref/fake_openai_server.mjs TTFT_MS ITL_MS
//
// Listens on 127.0.0.1 (a free port, printed as "port N" on stdout) and serves
//   GET  /v1/models            {"data":[{"id":"fake-model"}]}
//   POST /v1/completions       SSE: max_tokens chunks {"choices":[{"text":..}]},
//   POST /v1/chat/completions  (chat: delta.content / max_completion_tokens),
//                              the first after TTFT_MS, the rest ITL_MS apart,
//                              then a usage chunk (unless model is
//                              "fake-no-usage") and [DONE]. The texts are
//                              "the", " the", ... (one stories260K token each).
//                              Model "fake-llama-server" streams as llama-server
//                              does: each chunk " the the" (two tokens, so a
//                              re-tokenizing count is wrong), usage in the last
//                              chunk beside an empty choice with finish_reason.
//                              Model "fake-nul": each text is "\u0000the"
//                              (a NUL byte token, as llama-server sends one).
//                              Model "fake-fail-second": that model's second
//                              request gets a 503 with an OpenAI-style error.
//   GET  /stats                {"requests", "max_in_flight", "prompt_lens", "max_tokens", "bodies"}
// Anything else is a 404 with an OpenAI-style error. It exits when stdin closes.
import http from "node:http";

const ttft = Number(process.argv[2] ?? 50), itl = Number(process.argv[3] ?? 10);
const stats = { requests: 0, max_in_flight: 0, prompt_lens: [], max_tokens: [], bodies: [] };
let inFlight = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function notFound(res) {
  res.writeHead(404, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ error: { message: "not found", type: "NotFoundError", code: 404 } }));
}

const server = http.createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/v1/models") {
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify({ object: "list", data: [{ id: "fake-model", object: "model" }] }));
  }
  if (req.method === "GET" && req.url === "/stats") {
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify(stats));
  }
  const chat = req.url === "/v1/chat/completions";
  if (req.method !== "POST" || (!chat && req.url !== "/v1/completions")) return notFound(res);
  let raw = "";
  for await (const part of req) raw += part;
  const body = JSON.parse(raw);
  const n = chat ? body.max_completion_tokens : body.max_tokens;
  stats.requests++;
  stats.bodies.push(body);
  stats.max_tokens.push(n);
  stats.prompt_lens.push(chat ? body.messages[0].content.length : body.prompt.length);
  if (body.model === "fake-fail-second" && stats.bodies.filter((b) => b.model === body.model).length === 2) {
    res.writeHead(503, { "Content-Type": "application/json" });
    return res.end(JSON.stringify({ error: { message: "fixture: second request refused", type: "ServiceUnavailableError", code: 503 } }));
  }
  inFlight++;
  stats.max_in_flight = Math.max(stats.max_in_flight, inFlight);
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  const send = (o) => res.write(`data: ${JSON.stringify(o)}\n\n`);
  const llama = body.model === "fake-llama-server";
  for (let i = 0; i < n; i++) {
    await sleep(i === 0 ? ttft : itl);
    const text = llama ? " the the" : body.model === "fake-nul" ? "\u0000the" : i === 0 ? "the" : " the";
    send(chat ? { choices: [{ index: 0, delta: { content: text } }] } : { choices: [{ index: 0, text }] });
  }
  if (llama)
    send({ choices: [{ index: 0, text: "", finish_reason: "length" }],
           usage: { prompt_tokens: stats.prompt_lens.at(-1), completion_tokens: n } });
  else if (body.model !== "fake-no-usage")
    send({ choices: [], usage: { prompt_tokens: stats.prompt_lens.at(-1), completion_tokens: n } });
  res.write("data: [DONE]\n\n");
  res.end();
  inFlight--;
});

server.listen(0, "127.0.0.1", () => console.log(`port ${server.address().port}`));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
