/*
 * test_metrics_engine.c - the metrics fed by the real engine (stories260K)
 * the way the front end feeds them: a mixed load (greedy and seeded, n = 1
 * and 3, stop and length, one request aborted mid-decode, shared prefixes)
 * on a KV pool small enough to force preemption, every step output handed
 * to metrics_on_step. The expectations come from the engine's own outputs,
 * counted independently here:
 *   - request_success_total by reason = the finish reasons the outputs gave;
 *   - generation_tokens_total = the tokens the outputs carried;
 *   - every per-request histogram counts every finished sequence;
 *     request_params_n counts requests and sums their n;
 *   - num_preemptions_total = the PREEMPTED events = the stats' count (> 0);
 *   - prefix_cache_{queries,hits}_total = the stats' sums;
 *   - per sequence (stats.h on the same steps): TTFT <= e2e,
 *     queue + inference <= e2e, prefill + decode = inference;
 *   - afterwards: 0 running, 0 waiting, KV usage back to 0.
 */
/* checks: 1 */
/* tags: tsan */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "metrics/metrics.h"
#include "metrics/stats.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"
#define NREQ 24

static double sample(const char *text, const char *name, const char *labels) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) || (p[n] != '{' && p[n] != ' ')) continue;
        const char *eol = strchr(p, '\n'), *sp = p;
        for (const char *q = p; q < (eol ? eol : p + strlen(p)); q++)
            if (*q == ' ') sp = q;
        if (labels) {
            char line[1024];
            size_t ln = (size_t)(sp - p);
            if (ln >= sizeof line) continue;
            memcpy(line, p, ln);
            line[ln] = 0;
            if (!strstr(line, labels)) continue;
        }
        return strtod(sp + 1, NULL);
    }
    return NAN;
}

#define CHECK_SAMPLE(text, name, labels, want)                                                 \
    do {                                                                                       \
        double got_ = sample(text, name, labels);                                              \
        CHECK(got_ == (double)(want), "%s{%s} = %.17g, want %.17g", name, labels ? labels : "", \
              got_, (double)(want));                                                           \
    } while (0)

TEST(test_metrics_consistent_with_engine_outputs) {
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = MODEL;
    a.num_threads = 2;
    a.max_model_len = 256;
    a.num_gpu_blocks_override = 20; /* 320 tokens for 24 requests: preemption */
    vllm_engine *e;
    CHECK(vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);

    metrics_config c;
    metrics_config_init(&c);
    c.model_name = "stories260K";
    c.max_model_len = info.max_model_len;
    c.block_size = info.block_size;
    c.num_gpu_blocks = info.num_gpu_blocks;
    metrics *m;
    CHECK(metrics_create(&c, &m) == VLLM_OK, "%s", vllm_errmsg());
    stats *st; /* the same steps through stats.h, for per-sequence checks */
    CHECK(stats_create(&st) == VLLM_OK);
    stats_iteration it;
    stats_iteration_init(&it);

    int32_t common[64];
    for (int32_t i = 0; i < 64; i++) common[i] = 3 + (i * 37 + 11) % 500;
    int64_t sum_n = 0;
    for (int32_t i = 0; i < NREQ; i++) {
        int32_t prompt[96], len = 0;
        if (i % 2 == 0) { /* a shared 64-token prefix: prefix-cache hits */
            memcpy(prompt, common, sizeof common);
            len = 64;
        }
        for (int32_t t = 0; t < 5 + i % 7; t++) prompt[len++] = 3 + (i * 131 + t * 17) % 500;
        vllm_sampling_params sp;
        vllm_sampling_params_init(&sp);
        sp.max_tokens = 8 + i % 17;
        sp.ignore_eos = i % 3 != 0; /* some may stop at EOS */
        sp.n = i % 6 == 5 ? 3 : 1;
        sp.temperature = i % 4 == 1 || sp.n > 1 ? 0.8f : 0.0f;
        sp.has_seed = true;
        sp.seed = (uint64_t)i;
        sp.n = i % 6 == 5 ? 3 : 1;
        sum_n += sp.n;
        char id[16];
        snprintf(id, sizeof id, "req-%d", i);
        CHECK(metrics_request_arrived(m, id, vllm_monotonic_time(), len, sp.n, sp.max_tokens) == VLLM_OK);
        CHECK(stats_add_request(st, id, vllm_monotonic_time(), len, sp.n, sp.max_tokens) == VLLM_OK);
        CHECK(vllm_engine_add_request(e, id, prompt, len, &sp, NULL) == VLLM_OK, "%s", vllm_errmsg());
    }

    int64_t tokens = 0, preempted_events = 0, stats_preemptions = 0, queries = 0, hits = 0;
    int64_t by_reason[4] = {0}, finished = 0, checked = 0;
    int32_t steps = 0, req7_tokens = 0;
    bool aborted = false;
    vllm_scheduler_stats last = {0};
    while (vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        CHECK(vllm_engine_step(e, &so) == VLLM_OK, "%s", vllm_errmsg());
        double now = vllm_monotonic_time();
        metrics_on_step(m, so, now);
        CHECK(stats_update(st, so, now, &it) == VLLM_OK);
        steps++;
        last = so->stats;
        stats_preemptions += so->stats.num_preemptions;
        queries += so->stats.prefix_cache_queries;
        hits += so->stats.prefix_cache_hits;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            tokens += o->num_new_tokens;
            if (!strcmp(o->request_id, "req-7")) req7_tokens += o->num_new_tokens;
            for (int32_t k = 0; k < o->num_events; k++)
                preempted_events += o->events[k].type == VLLM_EVENT_PREEMPTED;
            if (o->finish_reason != VLLM_FINISH_NONE) {
                by_reason[o->finish_reason]++;
                finished++;
            }
        }
        for (int32_t j = 0; j < it.num_finished; j++) {
            const stats_finished *f = &it.finished[j];
            if (f->ttft >= 0) CHECK(f->ttft <= f->e2e, "%s/%d: TTFT %g > e2e %g", f->request_id, f->index,
                                    f->ttft, f->e2e);
            CHECK(f->queue + f->inference <= f->e2e + 1e-9, "%s/%d: queue %g + inference %g > e2e %g",
                  f->request_id, f->index, f->queue, f->inference, f->e2e);
            CHECK(fabs(f->prefill + f->decode - f->inference) < 1e-9, "%s/%d", f->request_id, f->index);
            checked++;
        }
        if (!aborted && req7_tokens >= 3) { /* abort one request mid-decode */
            CHECK(vllm_engine_abort_request(e, "req-7") == VLLM_OK, "%s", vllm_errmsg());
            aborted = true;
        }
        CHECK(steps < 100000, "the engine does not finish");
    }
    CHECK(aborted && by_reason[VLLM_FINISH_ABORT] == 1, "%lld aborted", (long long)by_reason[VLLM_FINISH_ABORT]);
    CHECK(stats_preemptions > 0, "the tiny pool is meant to force preemption");
    CHECK(preempted_events == stats_preemptions);
    CHECK(checked == finished && finished == NREQ - 4 + 4 * 3, "%lld finished", (long long)finished);
    CHECK(stats_num_requests(st) == 0);

    char *t = NULL;
    size_t len;
    CHECK(metrics_render(m, vllm_monotonic_time(), &t, &len) == VLLM_OK);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"stop\"", by_reason[VLLM_FINISH_STOP]);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"length\"", by_reason[VLLM_FINISH_LENGTH]);
    CHECK_SAMPLE(t, "vllm:request_success_total", "finished_reason=\"abort\"", by_reason[VLLM_FINISH_ABORT]);
    CHECK_SAMPLE(t, "vllm:generation_tokens_total", NULL, tokens);
    CHECK_SAMPLE(t, "vllm:request_generation_tokens_sum", NULL, tokens);
    static const char *const per_request[] = {
        "vllm:e2e_request_latency_seconds_count",   "vllm:request_queue_time_seconds_count",
        "vllm:request_inference_time_seconds_count", "vllm:request_prefill_time_seconds_count",
        "vllm:request_decode_time_seconds_count",   "vllm:request_time_per_output_token_seconds_count",
        "vllm:request_prompt_tokens_count",         "vllm:request_generation_tokens_count",
        "vllm:request_params_max_tokens_count"};
    for (size_t i = 0; i < sizeof per_request / sizeof *per_request; i++)
        CHECK_SAMPLE(t, per_request[i], NULL, finished);
    CHECK_SAMPLE(t, "vllm:time_to_first_token_seconds_count", NULL, finished); /* req-7 had tokens */
    CHECK_SAMPLE(t, "vllm:request_params_n_count", NULL, NREQ);
    CHECK_SAMPLE(t, "vllm:request_params_n_sum", NULL, sum_n);
    CHECK_SAMPLE(t, "vllm:request_max_num_generation_tokens_count", NULL, NREQ);
    CHECK_SAMPLE(t, "vllm:num_preemptions_total", NULL, stats_preemptions);
    CHECK_SAMPLE(t, "vllm:prefix_cache_queries_total", NULL, queries);
    CHECK_SAMPLE(t, "vllm:prefix_cache_hits_total", NULL, hits);
    CHECK(hits > 0, "the shared prefix is meant to hit");
    CHECK_SAMPLE(t, "vllm:iteration_tokens_total_count", NULL, steps);
    CHECK_SAMPLE(t, "vllm:num_requests_running", NULL, 0);
    CHECK_SAMPLE(t, "vllm:num_requests_waiting", NULL, 0);
    CHECK_SAMPLE(t, "vllm:kv_cache_usage_perc", NULL, 0);
    CHECK(last.num_blocks_free == last.num_blocks_total);
    CHECK_SAMPLE(t, "vllm:kv_cache_headroom_tokens", NULL, (double)last.num_blocks_total * info.block_size);
    CHECK(sample(t, "vllm:time_to_first_token_seconds_sum", NULL) <=
          sample(t, "vllm:e2e_request_latency_seconds_sum", NULL));
    printf("# %d steps, %lld tokens, %lld finished sequences, %lld preemptions, %lld/%lld prefix tokens hit\n",
           steps, (long long)tokens, (long long)finished, (long long)stats_preemptions, (long long)hits,
           (long long)queries);
    free(t);
    stats_iteration_deinit(&it);
    stats_free(st);
    metrics_free(m);
    vllm_engine_free(e);
}

int main(void) {
    RUN(test_metrics_consistent_with_engine_outputs);
    return harness_done();
}
