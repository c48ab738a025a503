/*
 * test_spec_policy.c - speculative decoding's adaptive k (spec/spec_policy.h)
 * from its rules, worked by hand: the first step gets k; then
 * floor(mean accepted) + 1 with the mean weighted 1/2 on the newest step;
 * below a mean of 1/4 only every 8th output token proposes; the batch caps
 * k at 24 / R - 1 for R decoding sequences (off from R = 13).
 */
/* checks: 4 */
#include "harness.h"
#include "spec/spec_policy.h"

TEST(first_step_gets_k) {
    spec_policy_seq s = {0};
    CHECK(spec_policy_num_drafts(&s, 4, 1, 0) == 4);
    CHECK(spec_policy_num_drafts(&s, 7, 1, 3) == 7);
}

TEST(follows_acceptance) {
    spec_policy_seq s = {0};
    spec_policy_update(&s, 4, 4);                           /* mean 4 */
    CHECK(spec_policy_num_drafts(&s, 4, 1, 5) == 4, "mean %f", s.mean_accepted);
    spec_policy_update(&s, 4, 0);                           /* 2 */
    CHECK(spec_policy_num_drafts(&s, 4, 1, 6) == 3, "mean %f", s.mean_accepted);
    spec_policy_update(&s, 3, 1);                           /* 1.5 */
    CHECK(spec_policy_num_drafts(&s, 4, 1, 8) == 2, "mean %f", s.mean_accepted);
    spec_policy_update(&s, 0, 0);                           /* nothing verified: no change */
    CHECK(s.num_verified == 3 && s.mean_accepted == 1.5f);
    spec_policy_update(&s, 2, 0);                           /* 0.75 */
    CHECK(spec_policy_num_drafts(&s, 4, 1, 9) == 1, "mean %f", s.mean_accepted);
}

TEST(probes_when_missing) {
    spec_policy_seq s = {0};
    spec_policy_update(&s, 4, 0);                           /* mean 0 */
    CHECK(spec_policy_num_drafts(&s, 4, 1, 9) == 0);
    CHECK(spec_policy_num_drafts(&s, 4, 1, 15) == 0);
    CHECK(spec_policy_num_drafts(&s, 4, 1, 16) == 1);
    spec_policy_update(&s, 1, 1);                           /* 0.5: back to every step */
    CHECK(spec_policy_num_drafts(&s, 4, 1, 17) == 1, "mean %f", s.mean_accepted);
}

TEST(batch_caps_k) {
    spec_policy_seq s = {0};
    CHECK(spec_policy_num_drafts(&s, 8, 2, 0) == 8);        /* 24 / 2 - 1 = 11 */
    CHECK(spec_policy_num_drafts(&s, 8, 4, 0) == 5);        /* 24 / 4 - 1 */
    CHECK(spec_policy_num_drafts(&s, 8, 8, 0) == 2);
    CHECK(spec_policy_num_drafts(&s, 8, 12, 0) == 1);
    CHECK(spec_policy_num_drafts(&s, 8, 13, 0) == 0);
    CHECK(spec_policy_num_drafts(&s, 8, 16, 0) == 0);
}

int main(void) {
    RUN(first_step_gets_k);
    RUN(follows_acceptance);
    RUN(probes_when_missing);
    RUN(batch_caps_k);
    return harness_done();
}
