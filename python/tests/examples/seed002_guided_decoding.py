# The guided-decoding example of ../shared/seeds/002_0647c14d4f6cc478.txt,
# verbatim but for the lost indentation and a print of the outputs.
# tests/test_examples.py runs it with the import changed (vllm -> vllmc) and
# the model name replaced by a local model: each output must be one of the
# choices.
from vllm import LLM, SamplingParams
from vllm.sampling_params import GuidedDecodingParams
prompts = [
    "Полный отстой",
    "Погодка сегодня прекрасная",
]
guided_decoding_params = GuidedDecodingParams(choice=["Positive", "Negative"])
sampling_params = SamplingParams(guided_decoding=guided_decoding_params)
def main():
    llm = LLM(model="TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    outputs = llm.generate(prompts, sampling_params)
    for output in outputs:
        print(output.outputs[0].text)
if __name__ == "__main__":
    main()
