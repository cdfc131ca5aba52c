"""beliefdrift: measure and repair belief drift in language models answering multiple-choice questions.

The names below are the Python API for notebooks and scripts; the commands call the same functions. They are
imported on first use (`import beliefdrift` alone loads neither torch nor transformers):

>>> import beliefdrift as bd
>>> lm = bd.load_model()  # the embedded default model
>>> questions = bd.load_dataset("demo", n=2)
>>> results = bd.run_methods_many(lm, questions, [bd.parse_method("ppr")], 4, 5, seed=0, template="ppr-llama")

- models and data: `load_model`, `load_adapter`, `load_dataset`, `MCQuestion`;
- methods and paths: `parse_method`, `run_methods`, `run_methods_many`, `QuestionRunner`, `make_generator`;
- estimators: `martingale_posterior_mean` (q*), `rao_blackwell_mean` (q*_RB), `first_step_estimate` (θ̂_1);
- diagnostics: `marginal_drift`, `EMDConfig`, `question_emd` (one question), `emd_summary` (several);
- metrics: `summarize` (all of them with bootstrap intervals), `accuracy`, `auroc`, `ece`, `nll`, `brier`,
  `bootstrap_ci`;
- evaluation runs: `EvalConfig`, `evaluate` (a resumable run store), `score_rows`, `QualityControl`;
- SC fine-tuning (AM-PPR): `TrainConfig`, `SCTrainer`;
- settings: `load_settings` (a command's settings from a YAML preset and overrides), `run_identity`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

#: Each public name and the module that defines it.
_EXPORTS = {
    "load_model": "beliefdrift.backend.loading",
    "load_adapter": "beliefdrift.adapters",
    "load_dataset": "beliefdrift.data.registry",
    "MCQuestion": "beliefdrift.data.question",
    "parse_method": "beliefdrift.methods",
    "run_methods": "beliefdrift.methods",
    "run_methods_many": "beliefdrift.methods",
    "QuestionRunner": "beliefdrift.resampling",
    "make_generator": "beliefdrift.resampling",
    "martingale_posterior_mean": "beliefdrift.estimators",
    "rao_blackwell_mean": "beliefdrift.estimators",
    "first_step_estimate": "beliefdrift.estimators",
    "marginal_drift": "beliefdrift.diagnostics.marginal",
    "EMDConfig": "beliefdrift.diagnostics.emd",
    "question_emd": "beliefdrift.diagnostics.emd",
    "emd_summary": "beliefdrift.diagnostics.emd",
    "summarize": "beliefdrift.metrics",
    "accuracy": "beliefdrift.metrics",
    "auroc": "beliefdrift.metrics",
    "ece": "beliefdrift.metrics",
    "nll": "beliefdrift.metrics",
    "brier": "beliefdrift.metrics",
    "bootstrap_ci": "beliefdrift.metrics",
    "EvalConfig": "beliefdrift.evaluation_config",
    "evaluate": "beliefdrift.evaluation",
    "score_rows": "beliefdrift.scoring",
    "QualityControl": "beliefdrift.scoring",
    "TrainConfig": "beliefdrift.amortize.trainer",
    "SCTrainer": "beliefdrift.amortize.trainer",
    "load_settings": "beliefdrift.config",
    "run_identity": "beliefdrift.identity",
}

__all__ = ["__version__", *_EXPORTS]

def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access (PEP 562), then keep it in the package namespace."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'beliefdrift' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
