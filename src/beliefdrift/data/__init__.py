"""Benchmarks as lists of `MCQuestion`s (GSM8K: `MathProblem`s)."""

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.data.loaders": (
        "DataError", "MathProblem", "load_arc", "load_csqa", "load_demo", "load_gpqa_csv", "load_gsm8k",
        "load_mmlu_csv", "load_tinymmlu",
    ),
    "beliefdrift.data.question": ("LETTERS", "MCQuestion"),
    "beliefdrift.data.registry": ("DATASETS", "FORMATS", "detect_format", "load_dataset", "load_file", "subsample"),
}
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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
