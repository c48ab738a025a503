# The prefix-caching example of ../shared/seeds/002_0647c14d4f6cc478.txt,
# verbatim but for the lost indentation, the seed's placeholder for long_prefix
# ("<a piece of text that encodes to more than block_size tokens>") filled in,
# and a print of what the second call found in the prefix cache.
# tests/test_examples.py runs it with the import changed (vllm -> vllmc) and
# the model name replaced by a local model.
from vllm import LLM, SamplingParams
long_prefix = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
               "with her friends. One day, she saw a big red ball under a tree. ")
prompts = [
    "Привет, меня зовут",
    "Столица России — это",
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
def main():
    llm = LLM(model="TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    outputs = llm.generate(long_prefix + prompts[0], sampling_params)
    outputs = llm.generate(long_prefix + prompts[1], sampling_params)
    print(f"num_cached_tokens={outputs[0].num_cached_tokens}")
if __name__ == "__main__":
    main()
