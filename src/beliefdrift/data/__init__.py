"""Benchmarks as lists of `MCQuestion`s (GSM8K: `MathProblem`s)."""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
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
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
