/*
 * test_tracing.c - the OTLP protobuf encoder against bytes encoded by hand
 * from the protobuf wire format and opentelemetry-proto's field numbers, the
 * W3C traceparent parser against the Trace Context spec's rules (as
 * OpenTelemetry's propagator applies them), and the exporter's bounded
 * queue (drops counted, never blocks, shutdown bounded while the collector
 * hangs).
 *
 * Also a driver for tests/test_server_tracing.sh, which decodes its output
 * with the opentelemetry-proto package:
 *   test_tracing --encode-sample FILE   one ExportTraceServiceRequest with
 *                                       every value type, long strings and
 *                                       fixed ids (the values listed below)
 */
/* checks: 8 */
/* tags: tsan */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "harness.h"
#include "metrics/otlp.h"
#include "metrics/stats.h"
#include "metrics/tracing.h"

static bool bytes_equal(const otlp_buf *b, const uint8_t *want, size_t n) {
    if (b->failed || b->len != n) return false;
    return !memcmp(b->data, want, n);
}

static void hexdump(const otlp_buf *b, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < b->len && k + 4 < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%02x ", b->data[i]);
    out[k] = 0;
}

TEST(test_varints) {
    static const struct { uint64_t v; uint8_t bytes[10]; size_t n; } cases[] = {
        {0, {0x00}, 1},
        {1, {0x01}, 1},
        {127, {0x7f}, 1},
        {128, {0x80, 0x01}, 2},
        {300, {0xac, 0x02}, 2},                         /* the protobuf guide's example */
        {16384, {0x80, 0x80, 0x01}, 3},
        {UINT64_MAX, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10}, /* int64 -1 */
    };
    otlp_buf b = {0};
    char dump[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        otlp_buf_reset(&b);
        otlp_put_varint(&b, cases[i].v);
        hexdump(&b, dump, sizeof dump);
        CHECK(bytes_equal(&b, cases[i].bytes, cases[i].n), "%llu -> %s", (unsigned long long)cases[i].v, dump);
    }
    otlp_buf_reset(&b);
    otlp_put_int_field(&b, 3, -1); /* AnyValue.int_value = -1: tag 0x18, ten bytes */
    static const uint8_t neg[] = {0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    hexdump(&b, dump, sizeof dump);
    CHECK(bytes_equal(&b, neg, sizeof neg), "int_value -1 -> %s", dump);
    otlp_buf_free(&b);
}

TEST(test_scalar_fields) {
    otlp_buf b = {0};
    char dump[256];
    /* Span.start_time_unix_nano (7, fixed64): tag 7<<3|1 = 0x39, little-endian */
    otlp_put_fixed64_field(&b, 7, 0x0102030405060708ull);
    /* Span.flags (16, fixed32): tag 16<<3|5 = 133 = 0x85 0x01 */
    otlp_put_fixed32_field(&b, 16, 0x301);
    /* AnyValue.double_value (4, double): tag 0x21; 1.5 = 0x3ff8000000000000 */
    otlp_put_double_field(&b, 4, 1.5);
    /* Span.name (5, string): tag 0x2a, length, bytes */
    otlp_put_string_field(&b, 5, "hi");
    /* AnyValue.bool_value (2, bool): tag 0x10 */
    otlp_put_uint_field(&b, 2, 1);
    static const uint8_t want[] = {0x39, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                                   0x85, 0x01, 0x01, 0x03, 0x00, 0x00,
                                   0x21, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
                                   0x2a, 0x02, 'h', 'i',
                                   0x10, 0x01};
    hexdump(&b, dump, sizeof dump);
    CHECK(bytes_equal(&b, want, sizeof want), "got %s", dump);
    otlp_buf_free(&b);
}

TEST(test_nested_lengths) {
    /* ScopeSpans.scope (1) { name (1): 200 x 'a' } inside ResourceSpans.scope_spans (2):
     * the inner body is 3 + 200 = 203 bytes (length 0xcb 0x01), the outer 206 */
    otlp_buf b = {0};
    char name[201];
    memset(name, 'a', 200);
    name[200] = 0;
    size_t outer = otlp_begin(&b, 2);
    size_t inner = otlp_begin(&b, 1);
    otlp_put_string_field(&b, 1, name);
    otlp_end(&b, inner);
    otlp_end(&b, outer);
    uint8_t want[2 + 2 + 2 + 3 + 200];
    size_t k = 0;
    want[k++] = 0x12; /* 2<<3|2 */
    want[k++] = 0xce; /* 206 = 0x4e | 0x80, 0x01 */
    want[k++] = 0x01;
    want[k++] = 0x0a; /* 1<<3|2 */
    want[k++] = 0xcb; /* 203 */
    want[k++] = 0x01;
    want[k++] = 0x0a;
    want[k++] = 0xc8; /* 200 */
    want[k++] = 0x01;
    memset(want + k, 'a', 200);
    k += 200;
    CHECK(k == sizeof want);
    CHECK(bytes_equal(&b, want, sizeof want), "len %zu, want %zu; head %02x %02x %02x %02x %02x %02x",
          b.len, sizeof want, b.data[0], b.data[1], b.data[2], b.data[3], b.data[4], b.data[5]);
    otlp_buf_free(&b);
}

TEST(test_attributes) {
    otlp_buf b = {0};
    char dump[256];
    /* Span.attributes (9) KeyValue{key "k", value AnyValue{int_value 5}} */
    otlp_put_attr(&b, 9, &(otlp_attr){.key = "k", .type = OTLP_INT, .i = 5});
    /* KeyValue{key "r", value AnyValue{array_value ArrayValue{values [AnyValue{string "stop"}]}}} */
    const char *strs[] = {"stop"};
    otlp_put_attr(&b, 9, &(otlp_attr){.key = "r", .type = OTLP_STRING_ARRAY, .strs = strs, .num_strs = 1});
    static const uint8_t want[] = {0x4a, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x18, 0x05,
                                   0x4a, 0x0f, 0x0a, 0x01, 'r', 0x12, 0x0a, 0x2a, 0x08, 0x0a, 0x06,
                                   0x0a, 0x04, 's', 't', 'o', 'p'};
    hexdump(&b, dump, sizeof dump);
    CHECK(bytes_equal(&b, want, sizeof want), "got %s", dump);
    otlp_buf_free(&b);
}

TEST(test_traceparent) {
    uint8_t tid[16], sid[8], flags;
    /* the W3C spec's example */
    CHECK(tracing_parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tid, sid, &flags));
    CHECK(tid[0] == 0x4b && tid[15] == 0x36 && sid[0] == 0x00 && sid[7] == 0xb7 && flags == 1);
    CHECK(tracing_parse_traceparent("  00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ", tid, sid, &flags) &&
          flags == 0, "surrounding whitespace is allowed");
    /* a later version may add fields after a dash */
    CHECK(tracing_parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", tid, sid, &flags));
    static const char *const bad[] = {
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", /* version 00 has four fields */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* version ff is invalid */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero parent id */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* uppercase */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    /* short trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",    /* short flags */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  /* extra without a dash */
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!tracing_parse_traceparent(bad[i], tid, sid, &flags), "accepted '%s'", bad[i]);
    CHECK(!tracing_parse_traceparent(NULL, tid, sid, &flags));
}

TEST(test_config_from_env) {
    tracing_config c;
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
    CHECK(tracing_config_from_env(&c, "http://127.0.0.1:4318") == VLLM_OK);
    CHECK(c.max_queue_size == 2048 && c.max_export_batch_size == 512 && c.schedule_delay == 5.0 &&
          c.export_timeout == 10.0, "the SDK's defaults: %d %d %g %g", c.max_queue_size,
          c.max_export_batch_size, c.schedule_delay, c.export_timeout);
    setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", 1);
    CHECK(tracing_config_from_env(&c, "http://127.0.0.1:4318") == VLLM_OK);
    setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc", 1);
    CHECK(tracing_config_from_env(&c, "http://127.0.0.1:4317") == VLLM_ERR_INVALID);
    setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", 1);
    CHECK(tracing_config_from_env(&c, "http://127.0.0.1:4318") == VLLM_ERR_INVALID);
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
    setenv("OTEL_BSP_SCHEDULE_DELAY", "250", 1);
    CHECK(tracing_config_from_env(&c, "x:1") == VLLM_OK && c.schedule_delay == 0.25);
    setenv("OTEL_BSP_SCHEDULE_DELAY", "soon", 1);
    CHECK(tracing_config_from_env(&c, "x:1") == VLLM_ERR_INVALID);
    unsetenv("OTEL_BSP_SCHEDULE_DELAY");
    CHECK(tracing_config_from_env(&c, "") == VLLM_ERR_INVALID);
}

/* A collector that accepts connections (the kernel's backlog) and never answers. */
static int silent_listener(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static void finish(tracing *t, int i) {
    char id[32];
    snprintf(id, sizeof id, "req-%d", i);
    tracing_request_arrived(t, &(tracing_request){.request_id = id, .model = "m", .operation = "chat", .n = 1});
    stats_finished f = {.request_id = id, .reason = VLLM_FINISH_STOP, .arrival = clock_now(), .e2e = 0.001};
    tracing_sequence_finished(t, &f);
}

TEST(test_bounded_queue_and_hung_collector) {
    int port, fd = silent_listener(&port);
    CHECK(fd >= 0, "no loopback listener");
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    tracing_config c = {.endpoint = url, .service_name = "test", .max_queue_size = 4,
                        .max_export_batch_size = 4, .schedule_delay = 100, .export_timeout = 1};
    tracing *t;
    CHECK(tracing_create(&c, &t) == VLLM_OK);
    for (int i = 0; i < 4; i++) finish(t, i); /* a full batch: the exporter takes it and hangs in POST */
    usleep(300 * 1000);
    double t0 = clock_now();
    for (int i = 4; i < 14; i++) finish(t, i); /* 4 fit, 6 are dropped; none of this waits */
    double took = clock_now() - t0;
    tracing_counters k;
    tracing_get_counters(t, &k);
    CHECK(k.dropped_full == 6, "dropped %lld, want 6", (long long)k.dropped_full);
    CHECK(took < 0.05, "queueing 10 spans took %.3f s", took);
    /* a released request is forgotten: its late finish is ignored, not even counted as a drop */
    tracing_request_arrived(t, &(tracing_request){.request_id = "gone", .n = 2});
    tracing_request_released(t, "gone");
    tracing_sequence_finished(t, &(stats_finished){.request_id = "gone"});
    tracing_get_counters(t, &k);
    CHECK(k.dropped_full == 6, "dropped %lld after a released request", (long long)k.dropped_full);
    t0 = clock_now();
    tracing_free(t); /* the hung POST times out (1 s), the rest gets one short try */
    double shutdown = clock_now() - t0;
    close(fd);
    CHECK(shutdown < 6, "shutdown took %.1f s", shutdown);
}

TEST(test_free_null) { tracing_free(NULL); }

/* The sample for tests/test_server_tracing.sh: one request, two spans. */
static int encode_sample(const char *path) {
    otlp_buf b = {0};
    char longs[300];
    memset(longs, 'x', sizeof longs - 1);
    longs[sizeof longs - 1] = 0;
    const char *reasons[] = {"stop", "length"};
    otlp_attr attrs[] = {
        {.key = "s", .type = OTLP_STRING, .s = "h\xc3\xa9llo"},
        {.key = "long", .type = OTLP_STRING, .s = longs},
        {.key = "i", .type = OTLP_INT, .i = -42},
        {.key = "big", .type = OTLP_INT, .i = 1234567890123},
        {.key = "d", .type = OTLP_DOUBLE, .d = 0.125},
        {.key = "b", .type = OTLP_BOOL, .i = 1},
        {.key = "arr", .type = OTLP_STRING_ARRAY, .strs = reasons, .num_strs = 2},
    };
    size_t rs = otlp_begin(&b, OTLP_REQUEST_RESOURCE_SPANS);
    size_t res = otlp_begin(&b, OTLP_RESOURCE_SPANS_RESOURCE);
    otlp_put_attr(&b, OTLP_RESOURCE_ATTRIBUTES, &(otlp_attr){.key = "service.name", .type = OTLP_STRING, .s = "svc"});
    otlp_end(&b, res);
    size_t ss = otlp_begin(&b, OTLP_RESOURCE_SPANS_SCOPE_SPANS);
    size_t sc = otlp_begin(&b, OTLP_SCOPE_SPANS_SCOPE);
    otlp_put_string_field(&b, OTLP_SCOPE_NAME, "scope");
    otlp_put_string_field(&b, OTLP_SCOPE_VERSION, "1.0");
    otlp_end(&b, sc);
    otlp_span s = {.has_parent = true, .trace_state = "a=1,b=2", .name = "parent", .kind = OTLP_SPAN_KIND_SERVER,
                   .flags = 0x301, .start_ns = 1700000000123456789ull, .end_ns = 1700000001000000000ull,
                   .attrs = attrs, .num_attrs = (int32_t)(sizeof attrs / sizeof attrs[0])};
    for (int i = 0; i < 16; i++) s.trace_id[i] = (uint8_t)(i + 1);
    for (int i = 0; i < 8; i++) s.span_id[i] = (uint8_t)(0xa0 + i), s.parent_span_id[i] = (uint8_t)(0xb0 + i);
    otlp_put_span(&b, OTLP_SCOPE_SPANS_SPANS, &s);
    otlp_span c = {.name = "child", .kind = OTLP_SPAN_KIND_INTERNAL, .flags = 1, .start_ns = 5, .end_ns = 6};
    memcpy(c.trace_id, s.trace_id, 16);
    memset(c.span_id, 0xcc, 8);
    otlp_put_span(&b, OTLP_SCOPE_SPANS_SPANS, &c);
    otlp_end(&b, ss);
    otlp_end(&b, rs);
    FILE *f = fopen(path, "wb");
    bool ok = f && !b.failed && fwrite(b.data, 1, b.len, f) == b.len;
    if (f) fclose(f);
    otlp_buf_free(&b);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--encode-sample")) return encode_sample(argv[2]);
    RUN(test_varints);
    RUN(test_scalar_fields);
    RUN(test_nested_lengths);
    RUN(test_attributes);
    RUN(test_traceparent);
    RUN(test_config_from_env);
    RUN(test_bounded_queue_and_hung_collector);
    RUN(test_free_null);
    return harness_done();
}
