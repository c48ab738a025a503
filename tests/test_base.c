/* test_base.c - error messages and dtype conversions. */
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "base/error.h"
#include "harness.h"

TEST(test_error_message_and_prefix) {
    vllm_status rc = vllm_error(VLLM_ERR_FORMAT, "header length %d exceeds file", 99);
    CHECK(rc == VLLM_ERR_FORMAT);
    vllm_error_prefix("%s", "model.safetensors");
    CHECK(!strcmp(vllm_errmsg(), "model.safetensors: header length 99 exceeds file"), "%s", vllm_errmsg());
}

TEST(test_bf16_f16_round_trip) {
    /* Values exactly representable in each format survive; bf16 rounds to nearest even. */
    CHECK(bf16_to_f32(f32_to_bf16(1.5f)) == 1.5f);
    CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "ties to even: 0x%04x", f32_to_bf16(1.0f + 1.0f / 256));
    CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
    CHECK(f32_to_f16(-2.0f) == 0xc000);
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

int main(void) {
    RUN(test_error_message_and_prefix);
    RUN(test_bf16_f16_round_trip);
    return harness_done();
}
