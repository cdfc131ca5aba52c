"""Benchmarks as lists of `MCQuestion`s (GSM8K: `MathProblem`s)."""

from typing import TYPE_CHECKING

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
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.data.loaders import DataError as DataError
    from beliefdrift.data.loaders import MathProblem as MathProblem
    from beliefdrift.data.loaders import load_arc as load_arc
    from beliefdrift.data.loaders import load_csqa as load_csqa
    from beliefdrift.data.loaders import load_demo as load_demo
    from beliefdrift.data.loaders import load_gpqa_csv as load_gpqa_csv
    from beliefdrift.data.loaders import load_gsm8k as load_gsm8k
    from beliefdrift.data.loaders import load_mmlu_csv as load_mmlu_csv
    from beliefdrift.data.loaders import load_tinymmlu as load_tinymmlu
    from beliefdrift.data.question import LETTERS as LETTERS
    from beliefdrift.data.question import MCQuestion as MCQuestion
    from beliefdrift.data.registry import DATASETS as DATASETS
    from beliefdrift.data.registry import FORMATS as FORMATS
    from beliefdrift.data.registry import detect_format as detect_format
    from beliefdrift.data.registry import load_dataset as load_dataset
    from beliefdrift.data.registry import load_file as load_file
    from beliefdrift.data.registry import subsample as subsample
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
