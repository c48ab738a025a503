/*
 * test_server_frontend.c - the frontend (engine thread + output thread) on
 * the real engine and stories260K, without HTTP: the sink contract (on_added,
 * deltas, one finish per sequence, on_done last), text = decode(tokens),
 * greedy tokens = the llama2.c reference run (models/stories260K/
 * reference_bos_greedy200.json), stop strings cut where the reference text
 * first shows them, abort ends every sequence with ABORT and frees the KV
 * blocks, refused requests, the step observer, and shutdown.
 */
/* checks: 5 */
/* tags: tsan */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "server/frontend.h"

#define MODEL "models/stories260K"

typedef struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    vllm_status added;
    bool got_added, done, order_ok;
    int32_t n;
    char text[4][4096];
    size_t len[4];
    int32_t ids[4][600];
    int32_t nids[4];
    vllm_finish_reason finish[4];
    int finishes[4];
    char stop_str[4][32];
    int32_t stop_token[4];
    char error[256];
} rec;

static void on_added(void *ud, vllm_status rc, const char *error) {
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    if (r->got_added || r->done) r->order_ok = false;
    r->got_added = true;
    r->added = rc;
    if (error) snprintf(r->error, sizeof r->error, "%s", error);
    pthread_mutex_unlock(&r->mu);
}

static void on_delta(void *ud, const output_delta *d) {
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    int i = d->index;
    if (!r->got_added || r->done || i < 0 || i >= r->n || r->finishes[i]) r->order_ok = false;
    if (i >= 0 && i < 4) {
        if (r->len[i] + d->text_len < sizeof r->text[i]) {
            memcpy(r->text[i] + r->len[i], d->text, d->text_len);
            r->len[i] += d->text_len;
        }
        for (int32_t k = 0; k < d->num_tokens && r->nids[i] < 600; k++) r->ids[i][r->nids[i]++] = d->token_ids[k];
        if (d->finish_reason != VLLM_FINISH_NONE) {
            r->finishes[i]++;
            r->finish[i] = d->finish_reason;
            r->stop_token[i] = d->stop_token_id;
            if (d->stop_str) snprintf(r->stop_str[i], sizeof r->stop_str[i], "%s", d->stop_str);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

static void on_done(void *ud) {
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    if (!r->got_added || r->done) r->order_ok = false;
    r->done = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void rec_init(rec *r, int32_t n) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->order_ok = true;
    r->n = n;
}

static bool rec_wait(rec *r, double seconds) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)seconds;
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) != 0) break;
    bool done = r->done;
    pthread_mutex_unlock(&r->mu);
    return done;
}

static frontend *fe;
static tokenizer *tok;
static int32_t ref_ids[200];
static char ref_text[4096];
static atomic_int steps_seen, queued_seen, scheduled_seen;
static atomic_long last_running = -1;

static void observer(void *ud, const vllm_step_output *out) {
    atomic_fetch_add(&steps_seen, 1);
    for (int32_t i = 0; i < out->num_outputs; i++)
        for (int32_t k = 0; k < out->outputs[i].num_events; k++) {
            vllm_event_type t = out->outputs[i].events[k].type;
            if (t == VLLM_EVENT_QUEUED) atomic_fetch_add(&queued_seen, 1);
            if (t == VLLM_EVENT_SCHEDULED) atomic_fetch_add(&scheduled_seen, 1);
        }
    atomic_store(&last_running, out->stats.num_running + out->stats.num_waiting);
}

static vllm_status submit(const char *id, const int32_t *p, int32_t np, vllm_sampling_params *sp,
                          const char *const *stop, int32_t nstop, rec *r) {
    frontend_request q = {.request_id = id, .prompt_ids = p, .num_prompt_ids = np, .sp = *sp,
                          .stop = stop, .num_stop = nstop, .skip_special_tokens = true};
    frontend_sink s = {on_added, on_delta, on_done, r};
    return frontend_add_request(fe, &q, &s);
}

static void greedy(vllm_sampling_params *sp, int32_t max_tokens) {
    vllm_sampling_params_init(sp);
    sp->temperature = 0;
    sp->max_tokens = max_tokens;
}

TEST(test_greedy_matches_reference) {
    rec r;
    rec_init(&r, 1);
    vllm_sampling_params sp;
    greedy(&sp, 200);
    int32_t bos = 1;
    CHECK(submit("g", &bos, 1, &sp, NULL, 0, &r) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(rec_wait(&r, 60), "no on_done");
    CHECK(r.order_ok && r.added == VLLM_OK && r.finishes[0] == 1, "sink order");
    CHECK(r.nids[0] == 200 && !memcmp(r.ids[0], ref_ids, sizeof ref_ids), "tokens differ from the reference");
    CHECK(r.finish[0] == VLLM_FINISH_LENGTH, "finish %d", r.finish[0]);
    char *text;
    size_t len;
    CHECK(tokenizer_decode(tok, r.ids[0], r.nids[0], true, &text, &len) == VLLM_OK, "decode");
    CHECK(len == r.len[0] && !memcmp(text, r.text[0], len), "streamed text != decode(tokens)");
    free(text);
}

TEST(test_stop_string_and_n) {
    /* "Lily" first appears in the reference text; the output ends right before it */
    const char *stops[] = {"Lily"};
    const char *at = strstr(ref_text, "Lily");
    CHECK(at != NULL, "reference text has no Lily");
    rec r;
    rec_init(&r, 1);
    vllm_sampling_params sp;
    greedy(&sp, 200);
    int32_t bos = 1;
    CHECK(submit("s", &bos, 1, &sp, stops, 1, &r) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(rec_wait(&r, 60), "no on_done");
    CHECK(r.order_ok && r.finish[0] == VLLM_FINISH_STOP && !strcmp(r.stop_str[0], "Lily"), "stop");
    CHECK(r.len[0] == (size_t)(at - ref_text) && !memcmp(r.text[0], ref_text, r.len[0]), "text '%.*s'",
          (int)r.len[0], r.text[0]);
    /* n = 3 sampled: three sequences, one finish each */
    rec_init(&r, 3);
    vllm_sampling_params_init(&sp);
    sp.n = 3;
    sp.max_tokens = 20;
    sp.has_seed = true;
    sp.seed = 11;
    CHECK(submit("n3", &bos, 1, &sp, NULL, 0, &r) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(rec_wait(&r, 60), "no on_done");
    CHECK(r.order_ok && r.finishes[0] == 1 && r.finishes[1] == 1 && r.finishes[2] == 1, "finishes");
}

TEST(test_abort_frees) {
    rec r;
    rec_init(&r, 2);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.n = 2;
    sp.max_tokens = 500;
    sp.ignore_eos = true;
    int32_t bos = 1;
    CHECK(submit("a", &bos, 1, &sp, NULL, 0, &r) == VLLM_OK, "%s", vllm_errmsg());
    frontend_abort_request(fe, "a");
    CHECK(rec_wait(&r, 60), "no on_done");
    CHECK(r.order_ok && r.finish[0] == VLLM_FINISH_ABORT && r.finish[1] == VLLM_FINISH_ABORT,
          "finish %d %d", r.finish[0], r.finish[1]);
    CHECK(r.nids[0] < 500, "aborted after %d tokens", r.nids[0]);
    frontend_stats st;
    for (int i = 0; i < 100; i++) {
        frontend_get_stats(fe, &st);
        if (st.num_live_requests == 0 && st.sched.num_blocks_free == st.sched.num_blocks_total) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK(st.num_live_requests == 0, "%lld live", (long long)st.num_live_requests);
    CHECK(st.sched.num_blocks_free == st.sched.num_blocks_total, "%d of %d blocks free",
          st.sched.num_blocks_free, st.sched.num_blocks_total);
}

TEST(test_refused_and_observer) {
    rec r;
    rec_init(&r, 1);
    vllm_sampling_params sp;
    greedy(&sp, 4);
    int32_t bad = 99999;
    CHECK(submit("bad", &bad, 1, &sp, NULL, 0, &r) == VLLM_OK, "queued");
    CHECK(rec_wait(&r, 60), "no on_done");
    CHECK(r.order_ok && r.added != VLLM_OK && strstr(r.error, "vocabulary"), "refusal: %s", r.error);
    CHECK(r.nids[0] == 0 && r.finishes[0] == 0, "a refused request gets no delta");
    CHECK(atomic_load(&steps_seen) > 200, "observer saw %d steps", atomic_load(&steps_seen));
    /* g, s, n3 and a were queued; a was aborted before it could be scheduled */
    CHECK(atomic_load(&queued_seen) == 4 && atomic_load(&scheduled_seen) >= 3, "observer saw %d QUEUED, %d SCHEDULED",
          atomic_load(&queued_seen), atomic_load(&scheduled_seen));
    CHECK(atomic_load(&last_running) == 0, "last step reported %ld requests", atomic_load(&last_running));
}

TEST(test_shutdown_aborts_and_refuses) {
    rec r;
    rec_init(&r, 1);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.max_tokens = 500;
    sp.ignore_eos = true;
    int32_t bos = 1;
    CHECK(submit("late", &bos, 1, &sp, NULL, 0, &r) == VLLM_OK, "%s", vllm_errmsg());
    frontend_begin_shutdown(fe);
    CHECK(frontend_wait_idle(fe, 30), "not idle");
    CHECK(rec_wait(&r, 1) && r.finish[0] == VLLM_FINISH_ABORT, "finish %d", r.finish[0]);
    rec r2;
    rec_init(&r2, 1);
    CHECK(submit("after", &bos, 1, &sp, NULL, 0, &r2) == VLLM_ERR_FULL, "accepted during shutdown");
}

int main(void) {
    json_error_t err;
    json_t *ref = json_load_file(MODEL "/reference_bos_greedy200.json", 0, &err);
    if (!ref) {
        printf("FAIL test_server_frontend: %s\n", err.text);
        return 1;
    }
    for (int i = 0; i < 200; i++) ref_ids[i] = (int32_t)json_integer_value(json_array_get(json_object_get(ref, "greedy_ids"), (size_t)i));
    snprintf(ref_text, sizeof ref_text, "%s", json_string_value(json_object_get(ref, "runc_stdout")));
    json_decref(ref);
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = MODEL;
    vllm_engine *e;
    if (tokenizer_load(MODEL, &tok) != VLLM_OK || vllm_engine_create(&a, &e) != VLLM_OK ||
        frontend_create(e, tok, &fe) != VLLM_OK) {
        printf("FAIL test_server_frontend: %s\n", vllm_errmsg());
        return 1;
    }
    frontend_set_step_observer(fe, observer, NULL);
    RUN(test_greedy_matches_reference);
    RUN(test_stop_string_and_n);
    RUN(test_abort_frees);
    RUN(test_refused_and_observer);
    RUN(test_shutdown_aborts_and_refuses);
    frontend_free(fe);
    tokenizer_free(tok);
    return harness_done();
}
