# The basic example of ../shared/seeds/002_0647c14d4f6cc478.txt (adapted there
# from vLLM's basic.py), verbatim but for the lost indentation and the print
# loop the seed's text describes. tests/test_examples.py runs it with the
# import changed (vllm -> vllmc) and the model name replaced by a local model.
from vllm import LLM, SamplingParams
# Список промптов, которые будут переданы модели
prompts = [
    "Привет, меня зовут",
    "Столица России — это",
]
# Параметры сэмплирования (sampling) для генерации текста
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
def main():
    # Инициализация модели LLM (в данном случае — TinyLlama)
    llm = LLM(model="TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    # Генерация ответов для заданных промптов с использованием параметров
    # сэмплирования
    outputs = llm.generate(prompts, sampling_params)
    for output in outputs:
        print(f"Prompt: {output.prompt!r}, Generated text: {output.outputs[0].text!r}")
if __name__ == "__main__":
    main()
