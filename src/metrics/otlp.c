/*
 * otlp.c - see otlp.h.
 */
#include "metrics/otlp.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

void otlp_buf_reset(otlp_buf *b) {
    b->len = 0;
    b->failed = false;
}

void otlp_buf_free(otlp_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

static bool reserve(otlp_buf *b, size_t n) {
    if (b->failed) return false;
    if (buf_grow((void **)&b->data, &b->cap, b->len + n, 1) != VLLM_OK) {
        b->failed = true;
        return false;
    }
    return true;
}

static void put_raw(otlp_buf *b, const void *p, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t encode_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

void otlp_put_varint(otlp_buf *b, uint64_t v) {
    uint8_t tmp[10];
    put_raw(b, tmp, encode_varint(tmp, v));
}

void otlp_put_tag(otlp_buf *b, uint32_t field, uint32_t wire_type) {
    otlp_put_varint(b, (uint64_t)field << 3 | wire_type);
}

void otlp_put_uint_field(otlp_buf *b, uint32_t field, uint64_t v) {
    otlp_put_tag(b, field, OTLP_WIRE_VARINT);
    otlp_put_varint(b, v);
}

void otlp_put_int_field(otlp_buf *b, uint32_t field, int64_t v) {
    otlp_put_uint_field(b, field, (uint64_t)v);
}

void otlp_put_fixed32_field(otlp_buf *b, uint32_t field, uint32_t v) {
    uint8_t le[4];
    for (int i = 0; i < 4; i++) le[i] = (uint8_t)(v >> (8 * i));
    otlp_put_tag(b, field, OTLP_WIRE_FIXED32);
    put_raw(b, le, 4);
}

void otlp_put_fixed64_field(otlp_buf *b, uint32_t field, uint64_t v) {
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(v >> (8 * i));
    otlp_put_tag(b, field, OTLP_WIRE_FIXED64);
    put_raw(b, le, 8);
}

void otlp_put_double_field(otlp_buf *b, uint32_t field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits); /* IEEE 754 binary64, as protobuf's double */
    otlp_put_fixed64_field(b, field, bits);
}

void otlp_put_bytes_field(otlp_buf *b, uint32_t field, const void *p, size_t n) {
    otlp_put_tag(b, field, OTLP_WIRE_LEN);
    otlp_put_varint(b, n);
    put_raw(b, p, n);
}

void otlp_put_string_field(otlp_buf *b, uint32_t field, const char *s) {
    otlp_put_bytes_field(b, field, s ? s : "", s ? strlen(s) : 0);
}

size_t otlp_begin(otlp_buf *b, uint32_t field) {
    otlp_put_tag(b, field, OTLP_WIRE_LEN);
    size_t mark = b->len;
    put_raw(b, "", 1); /* the length, patched by otlp_end */
    return mark;
}

void otlp_end(otlp_buf *b, size_t mark) {
    if (b->failed) return;
    size_t body = b->len - mark - 1;
    size_t extra = varint_size(body) - 1;
    if (extra) {
        if (!reserve(b, extra)) return;
        memmove(b->data + mark + 1 + extra, b->data + mark + 1, body);
        b->len += extra;
    }
    encode_varint(b->data + mark, body);
}

void otlp_put_attr(otlp_buf *b, uint32_t field, const otlp_attr *a) {
    size_t kv = otlp_begin(b, field);
    otlp_put_string_field(b, OTLP_KV_KEY, a->key);
    size_t any = otlp_begin(b, OTLP_KV_VALUE);
    switch (a->type) {
    case OTLP_STRING: otlp_put_string_field(b, OTLP_ANY_STRING, a->s); break;
    case OTLP_INT: otlp_put_int_field(b, OTLP_ANY_INT, a->i); break;
    case OTLP_DOUBLE: otlp_put_double_field(b, OTLP_ANY_DOUBLE, a->d); break;
    case OTLP_BOOL: otlp_put_uint_field(b, OTLP_ANY_BOOL, a->i != 0); break;
    case OTLP_STRING_ARRAY: {
        size_t arr = otlp_begin(b, OTLP_ANY_ARRAY);
        for (int32_t i = 0; i < a->num_strs; i++) {
            size_t v = otlp_begin(b, OTLP_ARRAY_VALUES);
            otlp_put_string_field(b, OTLP_ANY_STRING, a->strs[i]);
            otlp_end(b, v);
        }
        otlp_end(b, arr);
        break;
    }
    }
    otlp_end(b, any);
    otlp_end(b, kv);
}

void otlp_put_span(otlp_buf *b, uint32_t field, const otlp_span *s) {
    size_t m = otlp_begin(b, field);
    otlp_put_bytes_field(b, OTLP_SPAN_TRACE_ID, s->trace_id, sizeof s->trace_id);
    otlp_put_bytes_field(b, OTLP_SPAN_SPAN_ID, s->span_id, sizeof s->span_id);
    if (s->trace_state && *s->trace_state) otlp_put_string_field(b, OTLP_SPAN_TRACE_STATE, s->trace_state);
    if (s->has_parent)
        otlp_put_bytes_field(b, OTLP_SPAN_PARENT_SPAN_ID, s->parent_span_id, sizeof s->parent_span_id);
    otlp_put_string_field(b, OTLP_SPAN_NAME, s->name);
    otlp_put_uint_field(b, OTLP_SPAN_KIND, (uint64_t)s->kind);
    otlp_put_fixed64_field(b, OTLP_SPAN_START_TIME, s->start_ns);
    otlp_put_fixed64_field(b, OTLP_SPAN_END_TIME, s->end_ns);
    for (int32_t i = 0; i < s->num_attrs; i++) otlp_put_attr(b, OTLP_SPAN_ATTRIBUTES, &s->attrs[i]);
    otlp_put_fixed32_field(b, OTLP_SPAN_FLAGS, s->flags);
    otlp_end(b, m);
}
