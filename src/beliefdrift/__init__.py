"""beliefdrift: measure and repair belief drift in language models answering multiple-choice questions.

The names below are the Python API for notebooks and scripts; the commands call the same functions. They are
imported on first use (`import beliefdrift` alone loads neither torch nor transformers):

>>> import beliefdrift as bd
>>> lm = bd.load_model()  # the embedded default model
>>> questions = bd.load_dataset("demo", n=2)
>>> results = bd.run_methods_many(lm, questions, [bd.parse_method("ppr")], paths=4, steps=5)

- models and data: `load_model` (a `LanguageModel`), `load_adapter`, `base_model`, `load_dataset`, `MCQuestion`;
- methods and paths: `parse_method` (a `Method`), `run_methods`, `run_methods_many` (`MethodResult`s),
  `QuestionRunner`, `Trajectories`, `make_generator`;
- estimators: `martingale_posterior_mean` (q*), `rao_blackwell_mean` (q*_RB), `first_step_estimate` (θ̂_1);
- diagnostics: `marginal_drift`, `marginal_shift`, `EMDConfig`, `emd_per_question` (each question's EMD, as the
  `emd` command stores it), `emd_rows` (those over questions), `emd_summary` (both in one call), `question_emd` and
  `aggregate_emd` (one question, stored summaries; `QuestionEMD`, `EMDRow`), `noise_floor` (the rows beside their
  Pólya-urn floor), the c.i.d. check `cid_check` (`CIDCheck`) and the drift test `drift_test` (`DriftTest`);
- metrics: `summarize` (all of them with bootstrap intervals, each an `Interval`), `accuracy`, `auroc`, `ece`, `nll`,
  `brier` (each a float), `nll_clipped`, `bootstrap_ci`; paired tests `paired_bootstrap`, `paired_summary`,
  `paired_mean_bootstrap` (each Δ a `PairedDelta`), `paired_scores` (of stored rows, `PairedComparison`s);
- runs: `evaluate` (runs or resumes a run store, returns a `Run`), `drift`, `emd`, `reasoning` (the same for the
  diagnostics), each taking `questions=` (objects or a dataset name), `lm=` (a model or its name), `config=` (its
  settings: `EvalConfig`, `DriftConfig`, `EMDCommandConfig`, `ReasoningCommandConfig`, or a YAML file) and the
  settings by the flags' names; `open_run` (any run directory, finished or partial: `.scores()` (`ScoreRow`s),
  `.records()`, `.trajectories()`, `.paired()`, `.emd_rows()`, `.path`), `write_export`, `score_rows`,
  `QualityControl`;
- SC fine-tuning (AM-PPR): `SCTrainer` (the same keywords; `TrainConfig`);
- settings: `load_settings` (a command's settings from a YAML preset and overrides), `run_identity`.

The parts these are built of are one tier down, in their packages: `bd.metrics` (the paired tests' p-values
`sign_test_p`, `sign_flip_p`, `studentized_p`, …), `bd.diagnostics` (the noise floor's `question_floor`,
`method_floors`, `with_floor`; the c.i.d. check's `last_answer_test`, `half_differences`, …), `bd.backend` (the model
interface, `LanguageModel`, `AnswerPaths`, `EngineSettings`, …).

Keyword arguments carry the CLI's names and defaults (`paths`, `steps`, `seed`, `template`, `template_ending`,
`dtype="auto"`), keyword-only after the model, questions and methods. `--quiet` silences the progress bars with
the messages (`show_progress`).
"""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports
from beliefdrift.progress import progress_bar as progress_bar
from beliefdrift.progress import show_progress as show_progress
from beliefdrift.version import __version__ as __version__

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
    from beliefdrift import amortize as amortize
    from beliefdrift import backend as backend
    from beliefdrift import cot as cot
    from beliefdrift import data as data
    from beliefdrift import diagnostics as diagnostics
    from beliefdrift import metrics as metrics
    from beliefdrift import prompts as prompts
    from beliefdrift.amortize.trainer import SCTrainer as SCTrainer
    from beliefdrift.backend.adapters import base_model as base_model
    from beliefdrift.backend.adapters import load_adapter as load_adapter
    from beliefdrift.backend.loading import load_model as load_model
    from beliefdrift.backend.model import LanguageModel as LanguageModel
    from beliefdrift.config.diagnostics import DriftConfig as DriftConfig
    from beliefdrift.config.diagnostics import EMDCommandConfig as EMDCommandConfig
    from beliefdrift.config.diagnostics import EMDConfig as EMDConfig
    from beliefdrift.config.evaluate import EvalConfig as EvalConfig
    from beliefdrift.config.options import QualityControl as QualityControl
    from beliefdrift.config.options import load_settings as load_settings
    from beliefdrift.config.reasoning import ReasoningCommandConfig as ReasoningCommandConfig
    from beliefdrift.config.train import TrainConfig as TrainConfig
    from beliefdrift.data.question import MCQuestion as MCQuestion
    from beliefdrift.data.registry import load_dataset as load_dataset
    from beliefdrift.diagnostics.cid import CIDCheck as CIDCheck
    from beliefdrift.diagnostics.cid import cid_check as cid_check
    from beliefdrift.diagnostics.drift_test import DriftTest as DriftTest
    from beliefdrift.diagnostics.drift_test import drift_test as drift_test
    from beliefdrift.diagnostics.emd import EMDRow as EMDRow
    from beliefdrift.diagnostics.emd import QuestionEMD as QuestionEMD
    from beliefdrift.diagnostics.emd import aggregate_emd as aggregate_emd
    from beliefdrift.diagnostics.emd import emd_per_question as emd_per_question
    from beliefdrift.diagnostics.emd import emd_rows as emd_rows
    from beliefdrift.diagnostics.emd import emd_summary as emd_summary
    from beliefdrift.diagnostics.emd import question_emd as question_emd
    from beliefdrift.diagnostics.marginal import marginal_drift as marginal_drift
    from beliefdrift.diagnostics.marginal import marginal_shift as marginal_shift
    from beliefdrift.diagnostics.noise_floor import noise_floor as noise_floor
    from beliefdrift.engine.estimators import first_step_estimate as first_step_estimate
    from beliefdrift.engine.estimators import martingale_posterior_mean as martingale_posterior_mean
    from beliefdrift.engine.estimators import rao_blackwell_mean as rao_blackwell_mean
    from beliefdrift.engine.methods import Method as Method
    from beliefdrift.engine.methods import MethodResult as MethodResult
    from beliefdrift.engine.methods import parse_method as parse_method
    from beliefdrift.engine.methods import run_methods as run_methods
    from beliefdrift.engine.methods import run_methods_many as run_methods_many
    from beliefdrift.engine.resampling import QuestionRunner as QuestionRunner
    from beliefdrift.engine.resampling import Trajectories as Trajectories
    from beliefdrift.engine.resampling import make_generator as make_generator
    from beliefdrift.metrics.functional import Interval as Interval
    from beliefdrift.metrics.functional import PairedDelta as PairedDelta
    from beliefdrift.metrics.functional import accuracy as accuracy
    from beliefdrift.metrics.functional import auroc as auroc
    from beliefdrift.metrics.functional import bootstrap_ci as bootstrap_ci
    from beliefdrift.metrics.functional import brier as brier
    from beliefdrift.metrics.functional import ece as ece
    from beliefdrift.metrics.functional import nll as nll
    from beliefdrift.metrics.functional import nll_clipped as nll_clipped
    from beliefdrift.metrics.functional import paired_bootstrap as paired_bootstrap
    from beliefdrift.metrics.functional import paired_mean_bootstrap as paired_mean_bootstrap
    from beliefdrift.metrics.functional import paired_summary as paired_summary
    from beliefdrift.metrics.functional import summarize as summarize
    from beliefdrift.runs.identity import run_identity as run_identity
    from beliefdrift.runs.paired import PairedComparison as PairedComparison
    from beliefdrift.runs.paired import paired_scores as paired_scores
    from beliefdrift.runs.results import Run as Run
    from beliefdrift.runs.results import drift as drift
    from beliefdrift.runs.results import emd as emd
    from beliefdrift.runs.results import evaluate as evaluate
    from beliefdrift.runs.results import open_run as open_run
    from beliefdrift.runs.results import reasoning as reasoning
    from beliefdrift.runs.results import write_export as write_export
    from beliefdrift.runs.scoring import ScoreRow as ScoreRow
    from beliefdrift.runs.scoring import score_rows as score_rows
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
    __all__ = ["__version__", *__all__]
