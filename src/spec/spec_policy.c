/*
 * spec_policy.c - see spec_policy.h.
 */
#include "spec/spec_policy.h"

int32_t spec_policy_num_drafts(const spec_policy_seq *s, int32_t k, int32_t num_decoding, int32_t num_output) {
    int32_t n = k;
    if (s->num_verified > 0) {
        if (s->mean_accepted < 0.25f && num_output % SPEC_POLICY_PROBE_EVERY != 0) return 0;
        int32_t own = (int32_t)s->mean_accepted + 1;
        if (own < n) n = own;
    }
    if (num_decoding > 0) {
        int32_t cap = SPEC_POLICY_MAX_ROWS / num_decoding - 1;
        if (cap < n) n = cap;
    }
    return n > 0 ? n : 0;
}

void spec_policy_update(spec_policy_seq *s, int32_t num_drafts, int32_t num_accepted) {
    if (num_drafts <= 0) return;
    s->mean_accepted = s->num_verified == 0 ? (float)num_accepted : 0.5f * s->mean_accepted + 0.5f * (float)num_accepted;
    s->num_verified++;
}
