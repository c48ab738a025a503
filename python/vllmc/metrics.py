"""metrics.py - the metric objects LLM.get_metrics() returns (vLLM's vllm/v1/metrics/reader.py)."""
from dataclasses import dataclass
from typing import Dict


@dataclass
class Metric:
    name: str
    labels: Dict[str, str]


@dataclass
class Counter(Metric):
    value: int


@dataclass
class Gauge(Metric):
    value: float
