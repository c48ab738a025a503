/*
 * tool_parser.h - vLLM's tool-call parsers (--tool-call-parser, for
 * tool_choice "auto") and the streaming of tool calls as deltas, and its
 * reasoning parsers (--reasoning-parser: <think>...</think> split off as
 * reasoning_content). See tool_parser.c for the formats and the rules.
 *
 * Everything works on the generated text (not token ids), so the streamed
 * deltas and the non-streamed message come from the same rules: the
 * streaming state machines hold back exactly the text that could still turn
 * out to be a tag, and a whole output fed in one piece gives the message
 * the non-streaming path gives.
 */
#ifndef VLLM_SERVER_TOOL_PARSER_H
#define VLLM_SERVER_TOOL_PARSER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"

typedef enum tool_parser_kind {
    TOOL_PARSER_NONE = 0,
    TOOL_PARSER_HERMES,       /* <tool_call>{"name": ..., "arguments": {...}}</tool_call> */
    TOOL_PARSER_LLAMA3_JSON,  /* [<|python_tag|>]{"name": ..., "parameters"|"arguments": ...}[; {...}] */
    TOOL_PARSER_REQUIRED,     /* tool_choice "required": [{"name": ..., "parameters": {...}}, ...] */
} tool_parser_kind;

/* "hermes" / "llama3_json" (and "llama4_json", vLLM's alias); false otherwise. */
bool tool_parser_kind_from_name(const char *name, tool_parser_kind *out);

/* Whole output (vLLM's extract_tool_calls): the calls made, as an array of
 * {id, type: "function", function: {name, arguments (a JSON string)}}, or
 * NULL when none was (the text is all content). *content: the text left as
 * content (malloc'd), or NULL for JSON null. */
json_t *tool_parser_extract(tool_parser_kind k, const char *text, size_t len, char **content);

/* Streaming: feed the deltas in order, final = true on the last (it may be
 * empty). Each call appends the content to send now to `content` and the
 * tool-call deltas to send now to `deltas` (a JSON array; one object per
 * chunk, in vLLM's shape: {index, id, type, function: {name}} first, then
 * {index, function: {arguments}}). */
typedef struct tool_parser_stream {
    tool_parser_kind kind;
    int state;           /* parser-specific */
    strbuf pending;      /* text not yet decided */
    int num_calls;       /* calls sent so far */
    int depth;           /* REQUIRED: JSON nesting depth scanned */
    bool in_string, escape;
    size_t scanned;      /* REQUIRED: bytes of pending scanned */
    size_t item_start;
} tool_parser_stream;

void tool_parser_stream_init(tool_parser_stream *s, tool_parser_kind k);
void tool_parser_stream_feed(tool_parser_stream *s, const char *text, size_t len, bool final, strbuf *content,
                             json_t *deltas);
void tool_parser_stream_free(tool_parser_stream *s);

/* ---- reasoning ------------------------------------------------------------ */

typedef enum reasoning_parser_kind {
    REASONING_PARSER_NONE = 0,
    REASONING_PARSER_QWEN3,        /* both <think> and </think> needed, else all content */
    REASONING_PARSER_DEEPSEEK_R1,  /* reasoning until </think> (the <think> may be in the prompt) */
} reasoning_parser_kind;

bool tool_parser_reasoning_from_name(const char *name, reasoning_parser_kind *out);

/* Whole output: *reasoning and *content malloc'd, or NULL for JSON null. */
void tool_parser_reasoning_split(reasoning_parser_kind k, const char *text, size_t len, char **reasoning,
                                 char **content);

typedef struct reasoning_stream {
    reasoning_parser_kind kind;
    int state;           /* 0 undecided, 1 reasoning, 2 content */
    strbuf pending;
} reasoning_stream;

void tool_parser_reasoning_stream_init(reasoning_stream *s, reasoning_parser_kind k);
/* Appends what to send now to reasoning and content. */
void tool_parser_reasoning_stream_feed(reasoning_stream *s, const char *text, size_t len, bool final,
                                       strbuf *reasoning, strbuf *content);
void tool_parser_reasoning_stream_free(reasoning_stream *s);

/* Python's json.dumps(v, ensure_ascii=ascii) (separators ", " and ": ");
 * malloc'd. */
char *tool_parser_py_dumps(const json_t *v, bool ascii);

#endif
