// Reference renderings for the C Jinja interpreter (src/template/), computed at
// test time by @huggingface/jinja (the renderer transformers.js uses).
//
//   node tests/ref/render_ref.mjs cases tests/ref/jinja_cases.json
//       -> [{name, ok, output | error}] for each {name, template, context}
//   node tests/ref/render_ref.mjs chat tests/ref/chat_conversations.json
//       -> [{name, template, ok, output | error, tjs}] for each conversation x template,
//          the context built as transformers.js apply_chat_template builds it
//          (messages, add_generation_prompt, tools, documents, the special
//          tokens of tokenizer_config.json, extra kwargs); `tjs` is what
//          transformers.js's own apply_chat_template (its bundled jinja) renders,
//          as a cross-check between the two references.
//
// The clock is frozen at FIXED_NOW (also passed to the C side) so that
// strftime_now is deterministic; run with TZ=UTC.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

export const FIXED_NOW = Date.UTC(2024, 6, 26, 12, 0, 0); // 26 Jul 2024 12:00 UTC
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    super(...(args.length ? args : [FIXED_NOW]));
  }
  static now() {
    return FIXED_NOW;
  }
};

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");

function render(template, context) {
  try {
    return { ok: true, output: new Template(template).render(context) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
}

// transformers.js PreTrainedTokenizer.getToken: a string, or an AddedToken object's content.
function getToken(config, key) {
  const item = config[key];
  if (!item) return null;
  if (typeof item === "object") return item.__type === "AddedToken" ? item.content : null;
  return item;
}

function chatTemplateOf(config, tools) {
  let t = config.chat_template ?? null;
  if (Array.isArray(t)) {
    const named = Object.fromEntries(t.map(({ name, template }) => [name, template]));
    t = tools != null && named.tool_use ? named.tool_use : named.default;
  }
  return t;
}

async function chat(file) {
  const spec = JSON.parse(fs.readFileSync(file, "utf8"));
  let transformers = null;
  try {
    transformers = await import("@huggingface/transformers");
  } catch {
    transformers = null;
  }
  const templates = {};
  for (const [name, t] of Object.entries(spec.templates)) {
    const config = JSON.parse(fs.readFileSync(path.join(root, t.config), "utf8"));
    if (t.template) config.chat_template = fs.readFileSync(path.join(root, t.template), "utf8");
    let tokenizer = null;
    if (transformers && t.tokenizer) {
      const tj = JSON.parse(fs.readFileSync(path.join(root, t.tokenizer), "utf8"));
      tokenizer = new transformers.PreTrainedTokenizer(tj, config);
    }
    templates[name] = { config, tokenizer };
  }
  const out = [];
  for (const c of spec.cases) {
    for (const tname of c.templates) {
      const { config, tokenizer } = templates[tname];
      const tools = c.tools ?? null;
      const special = {};
      for (const key of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
        const v = getToken(config, key);
        if (v) special[key] = v;
      }
      const context = {
        messages: c.messages,
        add_generation_prompt: c.add_generation_prompt ?? false,
        tools,
        documents: c.documents ?? null,
        ...special,
        ...(c.kwargs ?? {}),
      };
      const r = render(chatTemplateOf(config, tools), context);
      let tjs = undefined;
      if (tokenizer) {
        try {
          tjs = tokenizer.apply_chat_template(c.messages, {
            tokenize: false,
            add_generation_prompt: c.add_generation_prompt ?? false,
            tools,
            documents: c.documents ?? null,
            ...(c.kwargs ?? {}),
          });
        } catch (e) {
          tjs = { error: String(e && e.message ? e.message : e) };
        }
      }
      out.push({ name: c.name, template: tname, ...r, tjs });
    }
  }
  return out;
}

const [mode, file] = process.argv.slice(2);
if (mode === "cases") {
  const cases = JSON.parse(fs.readFileSync(file, "utf8"));
  const out = cases.map((c) => ({ name: c.name, ...render(c.template, c.context ?? {}) }));
  process.stdout.write(JSON.stringify(out));
} else if (mode === "chat") {
  process.stdout.write(JSON.stringify(await chat(file)));
} else if (mode === "now") {
  process.stdout.write(String(FIXED_NOW / 1000));
} else {
  console.error("usage: render_ref.mjs cases|chat FILE | now");
  process.exit(2);
}
