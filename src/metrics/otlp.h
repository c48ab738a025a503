/*
 * otlp.h - the protobuf wire format of the few OpenTelemetry (OTLP) messages
 * a trace export needs, written by hand: ExportTraceServiceRequest ->
 * ResourceSpans -> ScopeSpans -> Span, with KeyValue attributes.
 *
 * Protobuf's wire format is small: every field is a tag (field number << 3 |
 * wire type) as a varint, then a varint (ints, enums, bools), 8 bytes
 * little-endian (fixed64, double), 4 bytes (fixed32), or a varint length and
 * that many bytes (strings, bytes, nested messages). A nested message's
 * length comes before its bytes, so otlp_begin() writes the tag and a
 * one-byte length and otlp_end() patches it, moving the body up in the rare
 * case the length needs more than one byte.
 *
 * Field numbers are those of opentelemetry-proto (opentelemetry/proto/
 * collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
 * common/v1/common.proto, resource/v1/resource.proto); the OTLP_* constants
 * below name each one used. tests/test_otlp.c checks the bytes against
 * hand-encoded messages; tests/test_server_tracing.sh decodes what the
 * server sends with the opentelemetry-proto package's generated classes.
 *
 * Out of memory is sticky: the buffer's `failed` flag is set, later writes
 * do nothing, and the caller checks it once at the end.
 */
#ifndef VLLM_METRICS_OTLP_H
#define VLLM_METRICS_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ExportTraceServiceRequest */
#define OTLP_REQUEST_RESOURCE_SPANS 1
/* ResourceSpans */
#define OTLP_RESOURCE_SPANS_RESOURCE 1
#define OTLP_RESOURCE_SPANS_SCOPE_SPANS 2
/* Resource */
#define OTLP_RESOURCE_ATTRIBUTES 1
/* ScopeSpans */
#define OTLP_SCOPE_SPANS_SCOPE 1
#define OTLP_SCOPE_SPANS_SPANS 2
/* InstrumentationScope */
#define OTLP_SCOPE_NAME 1
#define OTLP_SCOPE_VERSION 2
/* Span */
#define OTLP_SPAN_TRACE_ID 1        /* bytes (16) */
#define OTLP_SPAN_SPAN_ID 2         /* bytes (8) */
#define OTLP_SPAN_TRACE_STATE 3     /* string */
#define OTLP_SPAN_PARENT_SPAN_ID 4  /* bytes (8) */
#define OTLP_SPAN_NAME 5            /* string */
#define OTLP_SPAN_KIND 6            /* enum */
#define OTLP_SPAN_START_TIME 7      /* fixed64, ns since the Unix epoch */
#define OTLP_SPAN_END_TIME 8        /* fixed64 */
#define OTLP_SPAN_ATTRIBUTES 9      /* KeyValue */
#define OTLP_SPAN_FLAGS 16          /* fixed32 */
/* KeyValue */
#define OTLP_KV_KEY 1
#define OTLP_KV_VALUE 2
/* AnyValue */
#define OTLP_ANY_STRING 1
#define OTLP_ANY_BOOL 2
#define OTLP_ANY_INT 3
#define OTLP_ANY_DOUBLE 4
#define OTLP_ANY_ARRAY 5
/* ArrayValue */
#define OTLP_ARRAY_VALUES 1

/* Span.SpanKind */
#define OTLP_SPAN_KIND_INTERNAL 1
#define OTLP_SPAN_KIND_SERVER 2
/* SpanFlags: the W3C trace flags in the low byte, and whether the parent is remote */
#define OTLP_SPAN_FLAGS_HAS_IS_REMOTE 0x100u
#define OTLP_SPAN_FLAGS_IS_REMOTE 0x200u

/* Wire types */
#define OTLP_WIRE_VARINT 0
#define OTLP_WIRE_FIXED64 1
#define OTLP_WIRE_LEN 2
#define OTLP_WIRE_FIXED32 5

typedef struct otlp_buf {
    uint8_t *data;
    size_t len, cap;
    bool failed;                     /* an allocation failed: the contents are garbage */
} otlp_buf;

/* Empties the buffer (keeps its memory); otlp_buf_free frees it. A zeroed
 * otlp_buf is an empty one. */
void otlp_buf_reset(otlp_buf *b);
void otlp_buf_free(otlp_buf *b);

void otlp_put_varint(otlp_buf *b, uint64_t v);
void otlp_put_tag(otlp_buf *b, uint32_t field, uint32_t wire_type);
/* Fields of each wire type; int64 negatives are written as their two's
 * complement (ten bytes), as protobuf does. */
void otlp_put_uint_field(otlp_buf *b, uint32_t field, uint64_t v);
void otlp_put_int_field(otlp_buf *b, uint32_t field, int64_t v);
void otlp_put_fixed32_field(otlp_buf *b, uint32_t field, uint32_t v);
void otlp_put_fixed64_field(otlp_buf *b, uint32_t field, uint64_t v);
void otlp_put_double_field(otlp_buf *b, uint32_t field, double v);
void otlp_put_bytes_field(otlp_buf *b, uint32_t field, const void *p, size_t n);
void otlp_put_string_field(otlp_buf *b, uint32_t field, const char *s); /* NULL: "" */

/* A nested message as field `field`: mark = otlp_begin(...), its fields,
 * otlp_end(b, mark). Nests to any depth. */
size_t otlp_begin(otlp_buf *b, uint32_t field);
void otlp_end(otlp_buf *b, size_t mark);

typedef enum otlp_type {
    OTLP_STRING,
    OTLP_INT,
    OTLP_DOUBLE,
    OTLP_BOOL,
    OTLP_STRING_ARRAY,
} otlp_type;

/* One attribute (KeyValue); strings borrowed. */
typedef struct otlp_attr {
    const char *key;
    otlp_type type;
    const char *s;                   /* OTLP_STRING */
    int64_t i;                       /* OTLP_INT; OTLP_BOOL: 0 or 1 */
    double d;                        /* OTLP_DOUBLE */
    const char *const *strs;         /* OTLP_STRING_ARRAY (num_strs) */
    int32_t num_strs;
} otlp_attr;

/* A KeyValue as field `field` (Span.attributes, Resource.attributes). */
void otlp_put_attr(otlp_buf *b, uint32_t field, const otlp_attr *a);

typedef struct otlp_span {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_span_id[8];
    bool has_parent;                 /* false: a root span (no parent_span_id field) */
    const char *trace_state;         /* W3C tracestate; NULL or "": none */
    const char *name;
    int32_t kind;                    /* OTLP_SPAN_KIND_* */
    uint32_t flags;                  /* trace flags | OTLP_SPAN_FLAGS_* */
    uint64_t start_ns, end_ns;       /* Unix epoch nanoseconds */
    const otlp_attr *attrs;          /* (num_attrs) */
    int32_t num_attrs;
} otlp_span;

/* A Span message as field `field` (ScopeSpans.spans). */
void otlp_put_span(otlp_buf *b, uint32_t field, const otlp_span *s);

#endif
