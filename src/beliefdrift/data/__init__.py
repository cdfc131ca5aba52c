"""Benchmarks as lists of `MCQuestion`s (GSM8K: `MathProblem`s)."""

from beliefdrift.data.loaders import (
    DataError,
    MathProblem,
    load_arc,
    load_csqa,
    load_demo,
    load_gpqa_csv,
    load_gsm8k,
    load_mmlu_csv,
    load_tinymmlu,
)
from beliefdrift.data.question import LETTERS, MCQuestion
from beliefdrift.data.registry import DATASETS, FORMATS, detect_format, load_dataset, load_file, subsample

__all__ = [
    "DATASETS",
    "FORMATS",
    "LETTERS",
    "DataError",
    "MCQuestion",
    "MathProblem",
    "detect_format",
    "load_arc",
    "load_csqa",
    "load_dataset",
    "load_demo",
    "load_file",
    "load_gpqa_csv",
    "load_gsm8k",
    "load_mmlu_csv",
    "load_tinymmlu",
    "subsample",
]
