"""lora/request.py - vLLM's LoRARequest: an adapter's name, a positive id and
the path of its PEFT directory. LLM(enable_lora=True) loads it in the engine
the first time a request names it (llm.py: LLM._lora_name)."""
from dataclasses import dataclass
from typing import Optional


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    lora_local_path: Optional[str] = None
    long_lora_max_len: Optional[int] = None
    base_model_name: Optional[str] = None
    tensorizer_config_dict: Optional[dict] = None

    def __post_init__(self):
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")

    @property
    def adapter_id(self):
        return self.lora_int_id

    @property
    def name(self):
        return self.lora_name

    @property
    def path(self):
        return self.lora_path
