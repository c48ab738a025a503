# The n-gram speculative decoding example of
# ../shared/seeds/002_0647c14d4f6cc478.txt, verbatim but for the lost
# indentation and a print of the outputs. tests/test_examples.py runs it with
# the import changed (vllm -> vllmc) and the model name replaced by a local
# model.
from vllm import LLM, SamplingParams
prompts = [
    "Привет, меня зовут",
    "Столица России — это",
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
speculative_config={
    "method": "ngram",
    "prompt_lookup_max": 5,
    "prompt_lookup_min": 3,
    "num_speculative_tokens": 3,
}
def main():
    llm = LLM(model="TinyLlama/TinyLlama-1.1B-Chat-v1.0", speculative_config=speculative_config)
    outputs = llm.generate(prompts, sampling_params)
    for output in outputs:
        print(f"Prompt: {output.prompt!r}, Generated text: {output.outputs[0].text!r}")
if __name__ == "__main__":
    main()
