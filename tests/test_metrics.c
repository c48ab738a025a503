/*
 * test_metrics.c - the metrics subsystem against hand-computed expectations.
 *
 * Each timeline test scripts a request's life as engine step outputs with
 * chosen timestamps (binary fractions, so every interval is exact) and
 * checks the rendered /metrics text against values worked out by hand from
 * vLLM's interval definitions (stats.h; the metrics design doc): queue =
 * QUEUED -> first SCHEDULED, prefill = first SCHEDULED -> first token,
 * decode = first -> last token, inference = first SCHEDULED -> last token,
 * inter-token = successive token steps, TTFT and e2e from the front end's
 * arrival.
 *
 * Also a driver for tests/test_metrics.sh (which compares against Python's
 * prometheus_client and runs promtool):
 *   test_metrics --timeline FILE.json     render the metrics after a timeline
 *   test_metrics --format-doubles         one prom_format_double per stdin line
 */
/* checks: 16 */
/* tags: tsan */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "harness.h"
#include "metrics/metrics.h"
#include "metrics/prom.h"

/* ---- building step outputs ----------------------------------------------- */

#define MAX_OUTS 64

typedef struct step {
    vllm_step_output out;
    vllm_seq_output outs[MAX_OUTS];
    vllm_event events[MAX_OUTS][4];
    int32_t tokens[MAX_OUTS][8];
} step;

static step *step_begin(step *s, double ts) {
    memset(s, 0, sizeof *s);
    s->out.timestamp = ts;
    s->out.outputs = s->outs;
    s->out.stats.num_blocks_total = 100;
    s->out.stats.num_blocks_free = 100;
    return s;
}

static vllm_seq_output *step_seq(step *s, const char *id, int32_t index, int32_t num_tokens,
                                 vllm_finish_reason finish) {
    int32_t k = s->out.num_outputs++;
    vllm_seq_output *o = &s->outs[k];
    o->request_id = id;
    o->index = index;
    o->num_new_tokens = num_tokens;
    o->new_token_ids = s->tokens[k];
    o->finish_reason = finish;
    o->stop_token_id = -1;
    o->events = s->events[k];
    return o;
}

static void seq_event(step *s, vllm_seq_output *o, vllm_event_type type, double ts) {
    vllm_event *ev = s->events[o - s->outs];
    ev[o->num_events++] = (vllm_event){type, ts};
}

/* ---- reading the exposition ------------------------------------------------ */

/* The value of the first sample named `name` (then '{' or ' '), whose labels
 * contain `labels` when given. NAN if there is none. */
static double sample(const char *text, const char *name, const char *labels) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) || (p[n] != '{' && p[n] != ' ')) continue;
        const char *eol = strchr(p, '\n');
        const char *sp = strrchr(p, ' ');
        if (eol) { /* the last space of this line */
            sp = p;
            for (const char *q = p; q < eol; q++)
                if (*q == ' ') sp = q;
        }
        if (labels) {
            size_t ln = (size_t)(sp - p);
            char line[1024];
            if (ln >= sizeof line) continue;
            memcpy(line, p, ln);
            line[ln] = 0;
            if (!strstr(line, labels)) continue;
        }
        return strtod(sp + 1, NULL);
    }
    return NAN;
}

static char *render(metrics *m) {
    char *text = NULL;
    size_t len;
    if (metrics_render(m, 0.0, &text, &len) != VLLM_OK) return NULL;
    return text;
}

static metrics *make_metrics(const char *model, const char *hidden) {
    metrics_config c;
    metrics_config_init(&c);
    c.model_name = model;
    c.max_model_len = 4096;
    c.num_gpu_blocks = 100;
    c.show_hidden_metrics_for_version = hidden;
    metrics *m = NULL;
    if (metrics_create(&c, &m) != VLLM_OK) fprintf(stderr, "metrics_create: %s\n", vllm_errmsg());
    return m;
}

#define NEAR(a, b) (fabs((a) - (b)) < 1e-12)
#define CHECK_SAMPLE(text, name, labels, want)                                                 \
    do {                                                                                       \
        double got_ = sample(text, name, labels);                                              \
        CHECK(NEAR(got_, (want)), "%s{%s} = %.17g, want %.17g", name, labels ? labels : "",    \
              got_, (double)(want));                                                           \
    } while (0)

/* ---- formatting ------------------------------------------------------------- */

TEST(test_format_double_like_prometheus_client) {
    /* What Python's prometheus_client.utils.floatToGoString prints for each. */
    static const struct { double v; const char *want; } cases[] = {
        {0.0, "0.0"},           {1.0, "1.0"},          {0.001, "0.001"},
        {2560.0, "2560.0"},     {0.1, "0.1"},          {1e-05, "1e-05"},
        {0.0001, "0.0001"},     {123456.0, "123456.0"}, {1234567.0, "1.234567e+06"},
        {2000000.0, "2e+06"},   {1e16, "1e+16"},       {12345678901.0, "1.2345678901e+010"},
        {-1234567.0, "-1234567.0"}, {1.5e16, "1.5e+16"}, {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},    {NAN, "NaN"},          {0.30000000000000004, "0.30000000000000004"},
        {1000000.5, "1.0000005e+06"}, {1e22, "1e+22"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(!strcmp(prom_format_double(buf, cases[i].v), cases[i].want), "%.17g -> %s, want %s",
              cases[i].v, buf, cases[i].want);
}

TEST(test_exposition_shape_and_escaping) {
    metrics *m = make_metrics("my \"model\"\\v1\nx", NULL);
    CHECK(m);
    char *t = render(m);
    CHECK(t);
    /* counters: HELP/TYPE with _total, sorted labels, escaped value, a _created gauge */
    CHECK(strstr(t, "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
                    "# TYPE vllm:prompt_tokens_total counter\n"
                    "vllm:prompt_tokens_total{engine=\"0\",model_name=\"my \\\"model\\\"\\\\v1\\nx\"} 0.0\n"
                    "# HELP vllm:prompt_tokens_created Number of prefill tokens processed.\n"
                    "# TYPE vllm:prompt_tokens_created gauge\n"
                    "vllm:prompt_tokens_created{engine=\"0\",model_name=\"my \\\"model\\\"\\\\v1\\nx\"} "),
          "%s", t);
    /* histograms: le sorted between engine and model_name, +Inf, then _count, _sum */
    CHECK(strstr(t, "vllm:request_params_n_bucket{engine=\"0\",le=\"20.0\",model_name=\"my \\\"model\\\"\\\\v1\\nx\"} 0.0\n"
                    "vllm:request_params_n_bucket{engine=\"0\",le=\"+Inf\",model_name=\"my \\\"model\\\"\\\\v1\\nx\"} 0.0\n"
                    "vllm:request_params_n_count{engine=\"0\",model_name=\"my \\\"model\\\"\\\\v1\\nx\"} 0.0\n"
                    "vllm:request_params_n_sum{engine=\"0\",model_name=\"my \\\"model\\\"\\\\v1\\nx\"} 0.0\n"));
    /* request_success: every reason from the start */
    CHECK(strstr(t, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\","));
    /* 1-2-5 buckets up to max_model_len 4096: ... 1000, 2000, then +Inf */
    CHECK(strstr(t, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"2000.0\","));
    CHECK(!strstr(t, "le=\"5000.0\""));
    CHECK(strstr(t, "# TYPE vllm:iteration_tokens_total histogram\n"));
    CHECK(strstr(t, "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\","), "%s", t);
    CHECK(strstr(t, "enable_prefix_caching=\"True\",engine=\"0\","));
    CHECK(strstr(t, "num_gpu_blocks=\"100\","));
    /* process metrics, from /proc */
    CHECK(sample(t, "process_resident_memory_bytes", NULL) > 0);
    CHECK(sample(t, "process_open_fds", NULL) >= 3);
    free(t);
    metrics_free(m);
}

TEST(test_hidden_metrics_flag) {
    bool show;
    CHECK(metrics_parse_hidden_version(NULL, &show) == VLLM_OK && !show);
    CHECK(metrics_parse_hidden_version("0.10", &show) == VLLM_OK && show);
    CHECK(metrics_parse_hidden_version("0.9", &show) == VLLM_OK && !show);
    CHECK(metrics_parse_hidden_version("0.10.1", &show) == VLLM_OK && !show);
    CHECK(metrics_parse_hidden_version("abc", &show) == VLLM_ERR_INVALID);
    CHECK(strstr(vllm_errmsg(), "abc"), "%s", vllm_errmsg());
    CHECK(metrics_parse_hidden_version("0..1", &show) == VLLM_ERR_INVALID);

    metrics *m = make_metrics("m", NULL);
    char *t = render(m);
    CHECK(t && !strstr(t, "vllm:gpu_cache_usage_perc") && !strstr(t, "vllm:num_requests_swapped"));
    /* 0.11 still shows the renamed inter-token histogram, marked deprecated */
    CHECK(strstr(t, "# HELP vllm:time_per_output_token_seconds Histogram of time per output token in "
                    "seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.\n"));
    free(t);
    metrics_free(m);

    m = make_metrics("m", "0.10");
    step s;
    step_begin(&s, 1.0)->out.stats.kv_cache_usage = 0.25f;
    s.out.stats.prefix_cache_queries = 32;
    s.out.stats.prefix_cache_hits = 16;
    metrics_on_step(m, &s.out, 1.0);
    t = render(m);
    CHECK(t);
    CHECK(strstr(t, "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage."
                    "DEPRECATED: Use vllm:kv_cache_usage_perc instead.\n"));
    CHECK_SAMPLE(t, "vllm:gpu_cache_usage_perc", NULL, 0.25);
    CHECK_SAMPLE(t, "vllm:gpu_prefix_cache_queries_total", NULL, 32);
    CHECK_SAMPLE(t, "vllm:gpu_prefix_cache_hits_total", NULL, 16);
    CHECK(strstr(t, "# HELP vllm:num_requests_swapped Number of requests swapped to CPU. DEPRECATED"));
    CHECK(strstr(t, "# HELP vllm:time_in_queue_requests Histogram of time the request spent in the "
                    "queue in seconds. DEPRECATED: Use vllm:request_queue_time_seconds instead.\n"));
    free(t);
    metrics_free(m);
}

/* ---- timelines ----------------------------------------------------------- */

/* One request, n = 1: queued, scheduled, first token, two more, length. */
TEST(test_timeline_intervals) {
    metrics *m = make_metrics("m", NULL);
    CHECK(metrics_request_arrived(m, "r1", 10.0, 8, 1, 3) == VLLM_OK);
    CHECK(metrics_request_arrived(m, "r1", 10.0, 8, 1, 3) == VLLM_ERR_INVALID, "duplicate id");
    step s;
    seq_event(&s, step_seq(step_begin(&s, 1000.0), "r1", 0, 0, VLLM_FINISH_NONE), VLLM_EVENT_QUEUED,
              1000.0);
    s.out.stats.num_waiting = 1;
    metrics_on_step(m, &s.out, 10.0);
    vllm_seq_output *o = step_seq(step_begin(&s, 1000.5), "r1", 0, 1, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_SCHEDULED, 1000.25);
    s.out.stats.num_running = 1;
    s.out.stats.num_scheduled_tokens = 8;
    metrics_on_step(m, &s.out, 10.5);
    step_seq(step_begin(&s, 1000.75), "r1", 0, 1, VLLM_FINISH_NONE);
    s.out.stats.num_running = 1;
    metrics_on_step(m, &s.out, 10.75);
    step_seq(step_begin(&s, 1001.25), "r1", 0, 1, VLLM_FINISH_LENGTH);
    metrics_on_step(m, &s.out, 11.25);

    char *t = render(m);
    CHECK(t);
    /* TTFT = 10.5 - 10.0 */
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_count", NULL, 1);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_sum", NULL, 0.5);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_bucket", "le=\"0.25\"", 0);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_bucket", "le=\"0.5\"", 1);
    /* inter-token: 0.25, 0.5 (and the same in the deprecated alias) */
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_count", NULL, 2);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_sum", NULL, 0.75);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_bucket", "le=\"0.3\"", 1);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_bucket", "le=\"0.5\"", 2);
    CHECK_SAMPLE(t, "vllm:time_per_output_token_seconds_sum", NULL, 0.75);
    /* per request: decode 0.75 over 2 gaps */
    CHECK_SAMPLE(t, "vllm:request_time_per_output_token_seconds_sum", NULL, 0.375);
    CHECK_SAMPLE(t, "vllm:request_time_per_output_token_seconds_bucket", "le=\"0.4\"", 1);
    CHECK_SAMPLE(t, "vllm:request_time_per_output_token_seconds_bucket", "le=\"0.3\"", 0);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_sum", NULL, 1.25);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_bucket", "le=\"1.0\"", 0);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_bucket", "le=\"1.5\"", 1);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_sum", NULL, 0.25);
    CHECK_SAMPLE(t, "vllm:request_prefill_time_seconds_sum", NULL, 0.25);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_sum", NULL, 0.75);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_bucket", "le=\"0.5\"", 0);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_bucket", "le=\"0.8\"", 1);
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_sum", NULL, 1.0);
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_bucket", "le=\"0.8\"", 0);
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_bucket", "le=\"1.0\"", 1);
    /* counts */
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"length\"", 1);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"stop\"", 0);
    CHECK_SAMPLE(t, "vllm:prompt_tokens_total", NULL, 8);
    CHECK_SAMPLE(t, "vllm:generation_tokens_total", NULL, 3);
    CHECK_SAMPLE(t, "vllm:request_prompt_tokens_sum", NULL, 8);
    CHECK_SAMPLE(t, "vllm:request_generation_tokens_sum", NULL, 3);
    CHECK_SAMPLE(t, "vllm:request_params_max_tokens_sum", NULL, 3);
    CHECK_SAMPLE(t, "vllm:request_params_n_sum", NULL, 1);
    CHECK_SAMPLE(t, "vllm:request_max_num_generation_tokens_sum", NULL, 3);
    /* iteration tokens per step: 0, 8 + 1, 1, 1 */
    CHECK_SAMPLE(t, "vllm:iteration_tokens_total_count", NULL, 4);
    CHECK_SAMPLE(t, "vllm:iteration_tokens_total_sum", NULL, 11);
    CHECK_SAMPLE(t, "vllm:iteration_tokens_total_bucket", "le=\"8.0\"", 3);
    CHECK_SAMPLE(t, "vllm:iteration_tokens_total_bucket", "le=\"16.0\"", 4);
    free(t);
    metrics_free(m);
}

/* Preempted in decode: the gap counts into inter-token, decode, inference. */
TEST(test_timeline_preempted_in_decode) {
    metrics *m = make_metrics("m", NULL);
    metrics_request_arrived(m, "r2", 20.0, 4, 1, 16);
    step s;
    vllm_seq_output *o = step_seq(step_begin(&s, 2000.0), "r2", 0, 0, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_QUEUED, 2000.0);
    seq_event(&s, o, VLLM_EVENT_SCHEDULED, 2000.0);
    metrics_on_step(m, &s.out, 20.0);
    step_seq(step_begin(&s, 2000.5), "r2", 0, 1, VLLM_FINISH_NONE);
    metrics_on_step(m, &s.out, 20.5);
    step_seq(step_begin(&s, 2001.0), "r2", 0, 1, VLLM_FINISH_NONE);
    metrics_on_step(m, &s.out, 21.0);
    o = step_seq(step_begin(&s, 2001.25), "r2", 0, 0, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_PREEMPTED, 2001.25);
    s.out.stats.num_preemptions = 1;
    metrics_on_step(m, &s.out, 21.25);
    o = step_seq(step_begin(&s, 2002.0), "r2", 0, 0, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_SCHEDULED, 2002.0);
    metrics_on_step(m, &s.out, 22.0);
    step_seq(step_begin(&s, 2003.0), "r2", 0, 1, VLLM_FINISH_STOP);
    metrics_on_step(m, &s.out, 23.5);

    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:num_preemptions_total", NULL, 1);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_count", NULL, 2);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_sum", NULL, 2.5); /* 0.5 + 2.0 */
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_bucket", "le=\"1.0\"", 1);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_bucket", "le=\"2.5\"", 2);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_sum", NULL, 0.5);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_sum", NULL, 0.0);
    CHECK_SAMPLE(t, "vllm:request_prefill_time_seconds_sum", NULL, 0.5);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_sum", NULL, 2.5);
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_sum", NULL, 3.0); /* from the first SCHEDULED */
    CHECK_SAMPLE(t, "vllm:request_time_per_output_token_seconds_sum", NULL, 1.25);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_sum", NULL, 3.5);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"stop\"", 1);
    free(t);
    metrics_free(m);
}

/* Preempted in prefill: the gap counts into TTFT, prefill (and inference). */
TEST(test_timeline_preempted_in_prefill) {
    metrics *m = make_metrics("m", NULL);
    metrics_request_arrived(m, "r3", 30.0, 64, 1, 1);
    step s;
    seq_event(&s, step_seq(step_begin(&s, 3000.0), "r3", 0, 0, VLLM_FINISH_NONE), VLLM_EVENT_QUEUED,
              3000.0);
    metrics_on_step(m, &s.out, 30.0);
    seq_event(&s, step_seq(step_begin(&s, 3000.5), "r3", 0, 0, VLLM_FINISH_NONE),
              VLLM_EVENT_SCHEDULED, 3000.5); /* a first chunk */
    metrics_on_step(m, &s.out, 30.5);
    seq_event(&s, step_seq(step_begin(&s, 3001.0), "r3", 0, 0, VLLM_FINISH_NONE),
              VLLM_EVENT_PREEMPTED, 3001.0);
    s.out.stats.num_preemptions = 1;
    metrics_on_step(m, &s.out, 31.0);
    seq_event(&s, step_seq(step_begin(&s, 3002.0), "r3", 0, 0, VLLM_FINISH_NONE),
              VLLM_EVENT_SCHEDULED, 3002.0);
    metrics_on_step(m, &s.out, 32.0);
    step_seq(step_begin(&s, 3002.5), "r3", 0, 1, VLLM_FINISH_LENGTH);
    metrics_on_step(m, &s.out, 32.5);

    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:num_preemptions_total", NULL, 1);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_sum", NULL, 0.5);   /* to the first SCHEDULED */
    CHECK_SAMPLE(t, "vllm:request_prefill_time_seconds_sum", NULL, 2.0); /* 3000.5 -> 3002.5 */
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_sum", NULL, 2.5);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_sum", NULL, 0.0);
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_sum", NULL, 2.0);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_count", NULL, 0);
    CHECK_SAMPLE(t, "vllm:request_time_per_output_token_seconds_count", NULL, 1);
    CHECK_SAMPLE(t, "vllm:request_time_per_output_token_seconds_sum", NULL, 0.0);
    CHECK_SAMPLE(t, "vllm:prompt_tokens_total", NULL, 64); /* counted once, at the first token */
    free(t);
    metrics_free(m);
}

/* n = 2: sequence 1 forks off sequence 0 after prefill and inherits its
 * QUEUED/SCHEDULED; each sequence is a request in request-level metrics, n
 * and the longest generation are recorded once. */
TEST(test_timeline_parallel_sampling) {
    metrics *m = make_metrics("m", NULL);
    metrics_request_arrived(m, "r4", 40.0, 5, 2, 8);
    step s;
    vllm_seq_output *o = step_seq(step_begin(&s, 4000.0), "r4", 0, 0, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_QUEUED, 4000.0);
    seq_event(&s, o, VLLM_EVENT_SCHEDULED, 4000.0);
    metrics_on_step(m, &s.out, 40.0);
    step_begin(&s, 4000.5);
    step_seq(&s, "r4", 0, 1, VLLM_FINISH_NONE);
    step_seq(&s, "r4", 1, 1, VLLM_FINISH_NONE);
    metrics_on_step(m, &s.out, 40.5);
    step_begin(&s, 4001.0);
    step_seq(&s, "r4", 0, 1, VLLM_FINISH_STOP);
    step_seq(&s, "r4", 1, 1, VLLM_FINISH_NONE);
    metrics_on_step(m, &s.out, 41.0);
    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:request_params_n_count", NULL, 0); /* not until the group is done */
    free(t);
    step_seq(step_begin(&s, 4001.5), "r4", 1, 1, VLLM_FINISH_LENGTH);
    metrics_on_step(m, &s.out, 41.5);

    t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"stop\"", 1);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"length\"", 1);
    CHECK_SAMPLE(t, "vllm:request_params_n_count", NULL, 1);
    CHECK_SAMPLE(t, "vllm:request_params_n_sum", NULL, 2);
    CHECK_SAMPLE(t, "vllm:request_params_n_bucket", "le=\"1.0\"", 0);
    CHECK_SAMPLE(t, "vllm:request_params_n_bucket", "le=\"2.0\"", 1);
    CHECK_SAMPLE(t, "vllm:request_max_num_generation_tokens_sum", NULL, 3);
    CHECK_SAMPLE(t, "vllm:request_generation_tokens_sum", NULL, 5); /* 2 + 3 */
    CHECK_SAMPLE(t, "vllm:generation_tokens_total", NULL, 5);
    CHECK_SAMPLE(t, "vllm:prompt_tokens_total", NULL, 10); /* per sequence, as vLLM's child requests */
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_count", NULL, 2);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_sum", NULL, 1.0);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_count", NULL, 2);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_sum", NULL, 0.0);
    CHECK_SAMPLE(t, "vllm:request_prefill_time_seconds_sum", NULL, 1.0);    /* 0.5 each */
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_sum", NULL, 1.5);     /* 0.5 + 1.0 */
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_sum", NULL, 2.5);  /* 1.0 + 1.5 */
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_sum", NULL, 2.5);     /* 1.0 + 1.5 */
    CHECK_SAMPLE(t, "vllm:request_params_max_tokens_count", NULL, 2);
    free(t);
    metrics_free(m);
}

/* Aborts: a phase that never ended ends at the aborting step; unknown ids
 * and released requests record nothing. */
TEST(test_timeline_aborts) {
    metrics *m = make_metrics("m", NULL);
    metrics_request_arrived(m, "w", 50.0, 3, 1, 0);
    metrics_request_arrived(m, "p", 50.0, 3, 1, 0);
    metrics_request_arrived(m, "gone", 50.0, 3, 1, 0);
    metrics_request_released(m, "gone");
    step s;
    step_begin(&s, 5000.0);
    seq_event(&s, step_seq(&s, "w", 0, 0, VLLM_FINISH_NONE), VLLM_EVENT_QUEUED, 5000.0);
    seq_event(&s, step_seq(&s, "p", 0, 0, VLLM_FINISH_NONE), VLLM_EVENT_QUEUED, 5000.0);
    metrics_on_step(m, &s.out, 50.0);
    seq_event(&s, step_seq(step_begin(&s, 5000.5), "p", 0, 0, VLLM_FINISH_NONE),
              VLLM_EVENT_SCHEDULED, 5000.5);
    metrics_on_step(m, &s.out, 50.5);
    step_begin(&s, 5002.0);
    step_seq(&s, "w", 0, 0, VLLM_FINISH_ABORT);
    step_seq(&s, "p", 0, 0, VLLM_FINISH_ABORT);
    step_seq(&s, "gone", 0, 0, VLLM_FINISH_ABORT);
    step_seq(&s, "never-added", 0, 3, VLLM_FINISH_STOP);
    metrics_on_step(m, &s.out, 52.5);

    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"abort\"", 2);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"stop\"", 0);
    CHECK_SAMPLE(t, "vllm:generation_tokens_total", NULL, 0);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_count", NULL, 2);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_sum", NULL, 5.0);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_sum", NULL, 2.5);     /* w: 2.0, p: 0.5 */
    CHECK_SAMPLE(t, "vllm:request_prefill_time_seconds_sum", NULL, 1.5);   /* p: 5000.5 -> 5002.0 */
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_sum", NULL, 1.5);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_sum", NULL, 0.0);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_count", NULL, 0);
    CHECK_SAMPLE(t, "vllm:request_generation_tokens_bucket", "le=\"1.0\"", 2); /* 0 tokens each */
    CHECK_SAMPLE(t, "vllm:request_params_max_tokens_count", NULL, 0);         /* none given */
    CHECK_SAMPLE(t, "vllm:request_params_n_count", NULL, 2);
    free(t);
    metrics_free(m);
}

/* A stop string ends a sequence in the front end: it finishes there, and the
 * tokens the engine makes before it hears of it are not counted. */
TEST(test_front_end_finish) {
    metrics *m = make_metrics("m", NULL);
    metrics_request_arrived(m, "s", 60.0, 4, 1, 16);
    step s;
    vllm_seq_output *o = step_seq(step_begin(&s, 6000.0), "s", 0, 1, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_QUEUED, 5999.5);
    seq_event(&s, o, VLLM_EVENT_SCHEDULED, 5999.75);
    metrics_on_step(m, &s.out, 60.5);
    step_seq(step_begin(&s, 6000.5), "s", 0, 1, VLLM_FINISH_NONE);
    metrics_on_step(m, &s.out, 61.0);
    metrics_sequence_finished(m, "s", 0, VLLM_FINISH_STOP, 61.25); /* matched in that token */
    metrics_sequence_finished(m, "s", 0, VLLM_FINISH_STOP, 61.5);  /* twice: ignored */
    step_seq(step_begin(&s, 6001.0), "s", 0, 1, VLLM_FINISH_STOP); /* the engine's late word */
    metrics_on_step(m, &s.out, 61.75);
    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"stop\"", 1);
    CHECK_SAMPLE(t, "vllm:generation_tokens_total", NULL, 2);
    CHECK_SAMPLE(t, "vllm:request_generation_tokens_sum", NULL, 2);
    CHECK_SAMPLE(t, "vllm:e2e_request_latency_seconds_sum", NULL, 1.25);
    CHECK_SAMPLE(t, "vllm:request_queue_time_seconds_sum", NULL, 0.25);
    CHECK_SAMPLE(t, "vllm:request_prefill_time_seconds_sum", NULL, 0.25);
    CHECK_SAMPLE(t, "vllm:request_decode_time_seconds_sum", NULL, 0.5);
    CHECK_SAMPLE(t, "vllm:request_inference_time_seconds_sum", NULL, 0.75);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_count", NULL, 1);
    CHECK_SAMPLE(t, "vllm:request_params_n_count", NULL, 1);
    free(t);
    metrics_free(m);
}

TEST(test_scheduler_gauges_and_autoscaling) {
    metrics *m = make_metrics("m", NULL);
    step s;
    step_begin(&s, 1.0);
    s.out.stats.num_running = 3;
    s.out.stats.num_waiting = 4;
    s.out.stats.kv_cache_usage = 0.75f;
    s.out.stats.num_blocks_total = 100;
    s.out.stats.num_blocks_free = 25;
    metrics_on_step(m, &s.out, 100.0);
    char *t = NULL;
    size_t len;
    /* nothing finished yet: the delay estimate is the time waited so far */
    CHECK(metrics_render(m, 110.0, &t, &len) == VLLM_OK);
    CHECK_SAMPLE(t, "vllm:num_requests_running", NULL, 3);
    CHECK_SAMPLE(t, "vllm:num_requests_waiting", NULL, 4);
    CHECK_SAMPLE(t, "vllm:kv_cache_usage_perc", NULL, 0.75);
    CHECK_SAMPLE(t, "vllm:kv_cache_capacity_tokens", NULL, 1600);
    CHECK_SAMPLE(t, "vllm:kv_cache_headroom_tokens", NULL, 400);
    CHECK_SAMPLE(t, "vllm:queue_delay_estimate_seconds", NULL, 10.0);
    free(t);
    /* 8 requests finish at t = 120: 4 waiting / (8 per 20 s) = 10 s */
    for (int i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof id, "q%d", i);
        metrics_request_arrived(m, id, 100.0, 1, 1, 1);
    }
    step_begin(&s, 2.0);
    for (int i = 0; i < 8; i++) {
        static const char *ids[] = {"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7"};
        step_seq(&s, ids[i], 0, 1, VLLM_FINISH_LENGTH);
    }
    s.out.stats.num_waiting = 4;
    metrics_on_step(m, &s.out, 120.0);
    CHECK(metrics_render(m, 120.0, &t, &len) == VLLM_OK);
    CHECK_SAMPLE(t, "vllm:queue_delay_estimate_seconds", NULL, 10.0);
    free(t);
    /* nobody waiting: no delay */
    step_begin(&s, 3.0);
    metrics_on_step(m, &s.out, 121.0);
    CHECK(metrics_render(m, 121.0, &t, &len) == VLLM_OK);
    CHECK_SAMPLE(t, "vllm:queue_delay_estimate_seconds", NULL, 0.0);
    CHECK_SAMPLE(t, "vllm:num_requests_running", NULL, 0);
    free(t);
    metrics_free(m);
}

TEST(test_http_metrics) {
    metrics *m = make_metrics("m", NULL);
    metrics_http_observe(m, "/v1/completions", "POST", 200, 0.25, 120, 480);
    metrics_http_observe(m, "/v1/completions", "POST", 201, 0.75, 80, 20);
    metrics_http_observe(m, "/v1/completions", "POST", 400, 0.0625, 10, 100);
    metrics_http_observe(m, NULL, "GET", 404, 0.001, 0, 22);
    metrics_http_observe(m, "/metrics", "GET", 200, 0.001, 0, 5000);
    metrics_http_observe(m, "/health", "GET", 200, 0.001, 0, 0);
    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "http_requests_total", "{handler=\"/v1/completions\",method=\"POST\",status=\"2xx\"}", 2);
    CHECK_SAMPLE(t, "http_requests_total", "{handler=\"/v1/completions\",method=\"POST\",status=\"4xx\"}", 1);
    CHECK_SAMPLE(t, "http_requests_total", "{handler=\"none\",method=\"GET\",status=\"4xx\"}", 1);
    CHECK(!strstr(t, "handler=\"/metrics\"") && !strstr(t, "handler=\"/health\""));
    CHECK_SAMPLE(t, "http_request_size_bytes_count", "handler=\"/v1/completions\"", 3);
    CHECK_SAMPLE(t, "http_request_size_bytes_sum", "handler=\"/v1/completions\"", 210);
    CHECK_SAMPLE(t, "http_response_size_bytes_sum", "handler=\"/v1/completions\"", 600);
    CHECK(strstr(t, "# TYPE http_request_size_bytes summary\n"));
    CHECK_SAMPLE(t, "http_request_duration_seconds_bucket", "le=\"0.1\",method=\"POST\"", 1);
    CHECK_SAMPLE(t, "http_request_duration_seconds_bucket", "le=\"0.5\",method=\"POST\"", 2);
    CHECK_SAMPLE(t, "http_request_duration_seconds_bucket", "le=\"1.0\",method=\"POST\"", 3);
    CHECK_SAMPLE(t, "http_request_duration_highr_seconds_count", NULL, 4);
    CHECK_SAMPLE(t, "http_request_duration_highr_seconds_bucket", "le=\"0.01\"", 1);
    free(t);
    metrics_free(m);
}

/* vLLM's PrefixCachingMetrics: hits/queries over the steps holding the most
 * recent 1000 lookups; steps without lookups do not push data out. */
TEST(test_prefix_cache_hit_rate_window) {
    metrics *m = make_metrics("m", NULL);
    step s;
    char ids[1200][8];
    /* 600 lookups of 10 tokens, all hits */
    for (int i = 0; i < 600; i++) {
        snprintf(ids[i], sizeof ids[i], "a%d", i);
        metrics_request_arrived(m, ids[i], 0, 10, 1, 1);
        seq_event(&s, step_seq(step_begin(&s, i), ids[i], 0, 0, VLLM_FINISH_NONE),
                  VLLM_EVENT_SCHEDULED, i);
        s.out.stats.prefix_cache_queries = 10;
        s.out.stats.prefix_cache_hits = 10;
        metrics_on_step(m, &s.out, 0);
    }
    CHECK(NEAR(metrics_prefix_cache_hit_rate(m), 1.0));
    step_begin(&s, 700); /* idle step: no lookups */
    metrics_on_step(m, &s.out, 0);
    CHECK(NEAR(metrics_prefix_cache_hit_rate(m), 1.0));
    /* 600 more, all misses: the window keeps the latest 1000 = 400 hits + 600 misses */
    for (int i = 600; i < 1200; i++) {
        snprintf(ids[i], sizeof ids[i], "a%d", i);
        metrics_request_arrived(m, ids[i], 0, 10, 1, 1);
        seq_event(&s, step_seq(step_begin(&s, i), ids[i], 0, 0, VLLM_FINISH_NONE),
                  VLLM_EVENT_SCHEDULED, i);
        s.out.stats.prefix_cache_queries = 10;
        metrics_on_step(m, &s.out, 0);
    }
    CHECK(NEAR(metrics_prefix_cache_hit_rate(m), 0.4), "%g", metrics_prefix_cache_hit_rate(m));
    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:prefix_cache_queries_total", NULL, 12000);
    CHECK_SAMPLE(t, "vllm:prefix_cache_hits_total", NULL, 6000);
    free(t);
    metrics_free(m);
}

/* The log line, captured from stderr. */
TEST(test_log_line) {
    metrics *m = make_metrics("m", NULL);
    char path[] = "/tmp/test_metrics_log_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);

    metrics_log_stats(m, 0.0);           /* baseline: idle, DEBUG (not shown at INFO) */
    metrics_request_arrived(m, "x", 0.0, 100, 1, 50);
    step s;
    vllm_seq_output *o = step_seq(step_begin(&s, 1.0), "x", 0, 1, VLLM_FINISH_NONE);
    seq_event(&s, o, VLLM_EVENT_SCHEDULED, 0.5);
    s.out.stats.num_running = 2;
    s.out.stats.num_waiting = 1;
    s.out.stats.kv_cache_usage = 0.125f;
    s.out.stats.prefix_cache_queries = 100;
    s.out.stats.prefix_cache_hits = 25;
    metrics_on_step(m, &s.out, 1.0);
    for (int i = 0; i < 49; i++) { /* 49 more tokens */
        step_seq(step_begin(&s, 2.0 + i), "x", 0, 1, VLLM_FINISH_NONE);
        s.out.stats.num_running = 2;
        s.out.stats.num_waiting = 1;
        s.out.stats.kv_cache_usage = 0.125f;
        metrics_on_step(m, &s.out, 2.0 + i);
    }
    metrics_log_stats(m, 10.0);          /* 100 prompt, 50 generated over 10 s */
    metrics_log_stats(m, 20.0);          /* nothing now, but the last interval had: INFO */
    metrics_log_stats(m, 30.0);          /* idle twice: DEBUG, hidden */

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[4096] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    close(fd);
    unlink(path);

    const char *a = strstr(buf, "INFO ");
    CHECK(a, "no INFO line in: %s", buf);
    CHECK(strstr(a, "] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
                    "5.0 tokens/s, Running: 2 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.5%, Prefix "
                    "cache hit rate: 25.0%\n"),
          "%s", buf);
    const char *b = strstr(a + 1, "INFO ");
    CHECK(b && strstr(b, "] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
                         "0.0 tokens/s, Running: 2 reqs,"),
          "%s", buf);
    CHECK(!strstr(b + 1, "INFO "), "an idle interval logged at INFO: %s", buf);
    CHECK(!strstr(buf, "DEBUG"), "DEBUG shown at the INFO level: %s", buf);
    metrics_free(m);
}

TEST(test_env_interval) {
    double v;
    unsetenv("VLLM_LOG_STATS_INTERVAL");
    CHECK(metrics_log_interval_from_env(&v) == VLLM_OK && v == 10.0);
    setenv("VLLM_LOG_STATS_INTERVAL", "2.5", 1);
    CHECK(metrics_log_interval_from_env(&v) == VLLM_OK && v == 2.5);
    setenv("VLLM_LOG_STATS_INTERVAL", "-1", 1);
    CHECK(metrics_log_interval_from_env(&v) == VLLM_OK && v == 10.0);
    setenv("VLLM_LOG_STATS_INTERVAL", "soon", 1);
    CHECK(metrics_log_interval_from_env(&v) == VLLM_ERR_INVALID);
    CHECK(strstr(vllm_errmsg(), "VLLM_LOG_STATS_INTERVAL"));
    unsetenv("VLLM_LOG_STATS_INTERVAL");
}

/* The logger thread logs every interval and stops promptly. */
TEST(test_logger_thread) {
    metrics_config c;
    metrics_config_init(&c);
    c.model_name = "m";
    c.log_stats_interval = 0.05;
    metrics *m = NULL;
    CHECK(metrics_create(&c, &m) == VLLM_OK);
    CHECK(metrics_logger_start(m) == VLLM_OK);
    struct timespec ts = {0, 120 * 1000 * 1000};
    nanosleep(&ts, NULL);
    metrics_free(m); /* joins: a hang here fails the suite's time limit */
    c.log_stats_interval = 0;
    CHECK(metrics_create(&c, &m) == VLLM_ERR_INVALID);
}

/* Scrapes on another thread while steps are recorded: every scrape is a
 * consistent snapshot (+Inf bucket == count), counters never go back. */
typedef struct scraper_arg {
    metrics *m;
    _Atomic bool stop;
    _Atomic int scrapes;
    int bad;
    double last_gen;
} scraper_arg;

static void *scraper_main(void *p) {
    scraper_arg *a = p;
    while (!a->stop) {
        char *t = NULL;
        size_t len;
        if (metrics_render(a->m, 0, &t, &len) != VLLM_OK) {
            a->bad++;
            continue;
        }
        double inf = sample(t, "vllm:inter_token_latency_seconds_bucket", "le=\"+Inf\"");
        double cnt = sample(t, "vllm:inter_token_latency_seconds_count", NULL);
        double gen = sample(t, "vllm:generation_tokens_total", NULL);
        if (inf != cnt || gen < a->last_gen) a->bad++;
        a->last_gen = gen;
        a->scrapes++;
        free(t);
    }
    return NULL;
}

TEST(test_concurrent_scrape) {
    metrics *m = make_metrics("m", NULL);
    scraper_arg a = {.m = m};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, scraper_main, &a) == 0);
    step s;
    char id[32];
    int r = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (; (r < 400 || a.scrapes < 50) && r < 1000000; r++) { /* until both have done enough */
        snprintf(id, sizeof id, "c%d", r);
        metrics_request_arrived(m, id, r, 16, 1, 8);
        for (int k = 0; k < 8; k++) {
            step_seq(step_begin(&s, r + k * 0.01), id, 0, 1, k == 7 ? VLLM_FINISH_LENGTH : VLLM_FINISH_NONE);
            metrics_on_step(m, &s.out, r + k * 0.01);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    a.stop = true;
    pthread_join(th, NULL);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / (8.0 * r);
    printf("# concurrent scrape: %d scrapes during %d steps, %.2f us per metrics_on_step\n",
           a.scrapes, 8 * r, us);
    CHECK(a.bad == 0, "%d inconsistent scrapes of %d", a.bad, a.scrapes);
    char *t = render(m);
    CHECK(t);
    CHECK_SAMPLE(t, "vllm:generation_tokens_total", NULL, 8.0 * r);
    CHECK_SAMPLE(t, "vllm:inter_token_latency_seconds_count", NULL, 7.0 * r);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"length\"", r);
    free(t);
    metrics_free(m);
}

/* ---- driver mode ------------------------------------------------------------- */

static vllm_finish_reason parse_reason(const char *s) {
    if (!s) return VLLM_FINISH_NONE;
    if (!strcmp(s, "stop")) return VLLM_FINISH_STOP;
    if (!strcmp(s, "length")) return VLLM_FINISH_LENGTH;
    if (!strcmp(s, "abort")) return VLLM_FINISH_ABORT;
    return VLLM_FINISH_NONE;
}

static vllm_event_type parse_event(const char *s) {
    if (!strcmp(s, "QUEUED")) return VLLM_EVENT_QUEUED;
    if (!strcmp(s, "SCHEDULED")) return VLLM_EVENT_SCHEDULED;
    return VLLM_EVENT_PREEMPTED;
}

static int64_t jint(json_t *o, const char *k, int64_t dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static double jnum(json_t *o, const char *k, double dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static const char *jstr(json_t *o, const char *k, const char *dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* See tests/ref/metrics_ref.py for the timeline format. */
static int run_timeline(const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "%s:%d: %s\n", path, jerr.line, jerr.text);
        return 2;
    }
    json_t *cfg = json_object_get(root, "config");
    metrics_config c;
    metrics_config_init(&c);
    c.model_name = jstr(cfg, "model_name", "model");
    c.max_model_len = (int32_t)jint(cfg, "max_model_len", 2048);
    c.block_size = (int32_t)jint(cfg, "block_size", 16);
    c.num_gpu_blocks = jint(cfg, "num_gpu_blocks", 0);
    c.show_hidden_metrics_for_version = jstr(cfg, "show_hidden_metrics_for_version", NULL);
    metrics *m;
    if (metrics_create(&c, &m) != VLLM_OK) {
        fprintf(stderr, "%s\n", vllm_errmsg());
        json_decref(root);
        return 2;
    }
    size_t i;
    json_t *ev;
    static step s;
    json_array_foreach(json_object_get(root, "timeline"), i, ev) {
        json_t *st;
        if (json_object_get(ev, "arrive")) {
            metrics_request_arrived(m, jstr(ev, "arrive", ""), jnum(ev, "t", 0),
                                    (int32_t)jint(ev, "prompt", 0), (int32_t)jint(ev, "n", 1),
                                    (int32_t)jint(ev, "max_tokens", 0));
        } else if (json_object_get(ev, "release")) {
            metrics_request_released(m, jstr(ev, "release", ""));
        } else if (json_object_get(ev, "http")) {
            json_t *h = json_object_get(ev, "http");
            metrics_http_observe(m, jstr(h, "handler", NULL), jstr(h, "method", "GET"),
                                 (int)jint(h, "status", 200), jnum(h, "duration", 0),
                                 jint(h, "request_bytes", 0), jint(h, "response_bytes", 0));
        } else if ((st = json_object_get(ev, "step"))) {
            step_begin(&s, jnum(st, "ts", 0));
            json_t *ss = json_object_get(st, "stats");
            vllm_scheduler_stats *x = &s.out.stats;
            x->num_running = (int32_t)jint(ss, "running", 0);
            x->num_waiting = (int32_t)jint(ss, "waiting", 0);
            x->kv_cache_usage = (float)jnum(ss, "kv_cache_usage", 0);
            x->prefix_cache_queries = jint(ss, "prefix_cache_queries", 0);
            x->prefix_cache_hits = jint(ss, "prefix_cache_hits", 0);
            x->num_preemptions = (int32_t)jint(ss, "preemptions", 0);
            x->num_scheduled_tokens = (int32_t)jint(ss, "scheduled_tokens", 0);
            x->num_blocks_total = (int32_t)jint(ss, "blocks_total", 0);
            x->num_blocks_free = (int32_t)jint(ss, "blocks_free", 0);
            size_t j;
            json_t *o;
            json_array_foreach(json_object_get(st, "outputs"), j, o) {
                if (j >= MAX_OUTS) break;
                vllm_seq_output *so = step_seq(&s, jstr(o, "id", ""), (int32_t)jint(o, "index", 0),
                                               (int32_t)jint(o, "tokens", 0),
                                               parse_reason(jstr(o, "finish", NULL)));
                size_t k;
                json_t *e;
                json_array_foreach(json_object_get(o, "events"), k, e) {
                    if (k >= 4) break;
                    seq_event(&s, so, parse_event(json_string_value(json_array_get(e, 0))),
                              json_number_value(json_array_get(e, 1)));
                }
            }
            metrics_on_step(m, &s.out, jnum(st, "now", 0));
        }
    }
    char *text = NULL;
    size_t len = 0;
    int rc = 0;
    if (metrics_render(m, jnum(root, "render_now", 0), &text, &len) != VLLM_OK) {
        fprintf(stderr, "%s\n", vllm_errmsg());
        rc = 2;
    } else fwrite(text, 1, len, stdout);
    free(text);
    metrics_free(m);
    json_decref(root);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--timeline")) return run_timeline(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "--format-doubles")) {
        char line[128], buf[32];
        while (fgets(line, sizeof line, stdin)) printf("%s\n", prom_format_double(buf, strtod(line, NULL)));
        return 0;
    }
    RUN(test_format_double_like_prometheus_client);
    RUN(test_exposition_shape_and_escaping);
    RUN(test_hidden_metrics_flag);
    RUN(test_timeline_intervals);
    RUN(test_timeline_preempted_in_decode);
    RUN(test_timeline_preempted_in_prefill);
    RUN(test_timeline_parallel_sampling);
    RUN(test_timeline_aborts);
    RUN(test_front_end_finish);
    RUN(test_scheduler_gauges_and_autoscaling);
    RUN(test_http_metrics);
    RUN(test_prefix_cache_hit_rate_window);
    RUN(test_log_line);
    RUN(test_env_interval);
    RUN(test_logger_thread);
    RUN(test_concurrent_scrape);
    return harness_done();
}
