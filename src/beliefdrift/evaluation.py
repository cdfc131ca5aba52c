"""Evaluation runs: the paper's methods on a benchmark, stored unit by unit, then scored with quality control.

A unit of work is one (question, method); it draws its randomness from `make_generator(seed, question id,
method name)`, so a run gives the same numbers whether it runs in one go, resumes after a kill, or is
sharded over ranks (rank r takes the questions at positions i ≡ r mod world size). Scoring drops, per
method, the questions that fail quality control (DESIGN §2) and counts them.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from time import perf_counter
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import yaml
from tqdm import tqdm

from beliefdrift import __version__
from beliefdrift.backend import DEFAULT_MODEL, REGISTRY, LanguageModel, load_model
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import DATASETS, fingerprint, load_dataset
from beliefdrift.errors import UserError, check_device, check_model
from beliefdrift.methods import Method, MethodResult, parse_method, run_methods_many
from beliefdrift.metrics import MetricWarning, summarize
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING, load_template
from beliefdrift.resampling import direct_tokens, ppr_tokens
from beliefdrift.store import STORE_FILE, ResultRow, RunStore, StoreError

# ------------------------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class EvalConfig:
    """Everything an evaluation run needs. `identity()` is the part that determines the results."""

    model: str = DEFAULT_MODEL
    dataset: str = "demo"
    split: str | None = None
    n: int | None = None
    seed: int = 0
    methods: tuple[str, ...] = ("ppr", "ppr-seed1", "ppr-seed5", "direct")
    paths: int = 8  # J
    steps: int = 20  # N
    template: str = DEFAULT_PPR_TEMPLATE
    template_ending: str = DEFAULT_TEMPLATE_ENDING  # prompts.TEMPLATE_ENDINGS
    adapter: str | None = None
    dtype: str = "auto"
    device: str = "cpu"
    attn_implementation: str = "auto"  # for the forward passes the engine does not own
    device_map: str | None = None  # accelerate's, for a model larger than one device; results do not depend on it
    batch_questions: int = 0  # questions per engine batch (0: 16 on a GPU, 1 on the CPU); results do not depend on it
    data_dir: str | None = None
    qc_path_mass: float = 0.5
    qc_max_fraction: float = 0.5
    skip_long_prompts: bool = False

    @property
    def method_list(self) -> list[Method]:
        return [parse_method(name) for name in self.methods]

    @property
    def quality_control(self) -> QualityControl:
        return QualityControl(self.qc_path_mass, self.qc_max_fraction)

    def identity(self, questions: Sequence[MCQuestion], skipped: Sequence[MCQuestion] = ()) -> dict[str, Any]:
        """The settings stored with a run, with the content of its `questions` and the ones `skipped` (prompt
        longer than the model's context); resuming with any of them changed is refused."""
        template = load_template(self.template, self.template_ending)  # an unknown ending fails here
        return {
            "model": self.model if self.model in REGISTRY else _local_path_or_name(self.model),
            "dataset": self.dataset if self.dataset in DATASETS else _local_path_or_name(self.dataset),
            "split": self.split,
            "n": self.n or None,  # 0 and None both mean all questions
            "questions": len(questions),
            "questions_sha256": fingerprint(questions),
            **({"skipped_long_prompts": [q.id for q in skipped]} if self.skip_long_prompts else {}),
            "seed": self.seed,
            "methods": list(self.methods),
            "paths": self.paths,
            "steps": self.steps,
            "template": self.template,
            "template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16],
            # absent for the default ending, so that runs stored before the option existed still resume
            **({"template_ending": self.template_ending} if self.template_ending != DEFAULT_TEMPLATE_ENDING else {}),
            "adapter": _local_path_or_name(self.adapter) if self.adapter else None,
            "dtype": str(resolve_dtype(self.dtype, resolve_device(self.device))).removeprefix("torch."),
            "device": resolve_device(self.device).type,
            # absent when transformers chooses, so that runs stored before the option existed still resume
            **({"attn_implementation": self.attn_implementation} if self.attn_implementation != "auto" else {}),
            "version": __version__,
        }


CONFIG_KEYS = tuple(f.name for f in fields(EvalConfig))
#: The YAML types a setting's annotation accepts, and how to name them (methods: a string or a list of strings).
_PRESET_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "str | None": ((str, type(None)), "a string or null"),
    "int": ((int,), "an integer"),
    "int | None": ((int, type(None)), "an integer or null"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
    "tuple[str, ...]": ((str, list), "a method name or a list of them"),
}


def _local_path_or_name(spec: str) -> str:
    """An existing local path as an absolute path (the same run from another directory matches), else as is."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def table_order(method: Method) -> tuple[int, int]:
    """The paper's row order: PPR (NoSEED, SEED_1, …), then AM-PPR, then Direct-Query."""
    return ({"ppr": 0, "am-ppr": 1, "direct": 2}[method.kind], method.num_seeds)


def canonical_methods(names: str | Sequence[str]) -> tuple[str, ...]:
    """Method names parsed, de-duplicated and put in table order ("ppr,direct" and "direct ppr" agree)."""
    if isinstance(names, str):
        names = [names]
    methods = {m.name: m for m in (parse_method(part) for name in names for part in name.split(",") if part.strip())}
    if not methods:
        raise ValueError("no methods given")
    return tuple(name for name, method in sorted(methods.items(), key=lambda item: table_order(item[1])))


def load_preset(path: str | Path) -> dict[str, Any]:
    """A YAML preset: a mapping of `EvalConfig` field names to values (unknown keys are an error)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"--config {path}: not valid YAML ({err})") from err
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a mapping of settings, got {type(values).__name__}")
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        raise UserError(f"--config {path}: unknown settings {unknown}; known: {', '.join(CONFIG_KEYS)}")
    types = {f.name: str(f.type) for f in fields(EvalConfig)}
    for key, value in values.items():
        allowed, expected = _PRESET_TYPES[types[key]]
        if (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
                or (isinstance(value, list) and not all(isinstance(v, str) for v in value))):
            raise UserError(f"--config {path}: setting {key}: expected {expected}, got {value!r}")
    return values


def resolve_config(preset: Mapping[str, Any], given: Mapping[str, Any]) -> EvalConfig:
    """Built-in defaults, overridden by the preset, overridden by explicitly given (command-line) values.

    AM-PPR methods need an adapter: if they come from the preset and no adapter is set they are dropped
    with a note on stderr; asked for explicitly without one, they are an error.
    """
    values = {**preset, **given}
    methods = canonical_methods(values.get("methods", EvalConfig.methods))
    tuned = [name for name in methods if parse_method(name).needs_adapter]
    if tuned and not values.get("adapter"):
        if "methods" in given:
            raise ValueError(f"methods {', '.join(tuned)} need --adapter (a LoRA adapter directory)")
        methods = tuple(name for name in methods if name not in tuned)
        print(f"note: skipping {', '.join(tuned)}: no --adapter given", file=sys.stderr)
        if not methods:
            raise ValueError("no methods left to run without --adapter")
    config = EvalConfig(**{**values, "methods": methods})
    for name, flag in (("paths", "-J/--paths"), ("steps", "-N/--steps")):
        if getattr(config, name) < 1:
            raise UserError(f"{flag} (setting {name}) must be at least 1, got {getattr(config, name)}")
    if config.n is not None and config.n < 0:
        raise UserError(f"-n/--n (setting n) must be 0 (all questions) or more, got {config.n}")
    return config


# ------------------------------------------------------------------------------------------ adapters


def load_adapter(lm: LanguageModel, path: str | Path) -> LanguageModel:
    """The SC-tuned model: `lm` with the LoRA adapter at `path` (a second LanguageModel, same tokenizer).

    PEFT injects the LoRA layers into `lm.model` in place, so from now on run the base model inside
    `base_model(adapter_lm)`.
    """
    from peft import PeftModel

    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"--adapter {path}: not a PEFT adapter directory (no adapter_config.json)")
    tuned = PeftModel.from_pretrained(lm.model, str(path))
    tuned.eval()
    return LanguageModel(model=tuned, tokenizer=lm.tokenizer, name=f"{lm.name}+{path.name}")


def base_model(adapter_lm: LanguageModel | None) -> Any:
    """Context in which the base model runs without the adapter layers `load_adapter` injected."""
    return adapter_lm.model.disable_adapter() if adapter_lm is not None else nullcontext()


# ------------------------------------------------------------------------------------------ quality control


@dataclass(frozen=True)
class QualityControl:
    """Exclude a question from a method's metrics when more than `max_fraction` of its paths have mean
    valid_mass below `path_mass` (the paper's ">50% of paths off-format" rule; direct query = one path)."""

    path_mass: float = 0.5
    max_fraction: float = 0.5

    def excludes(self, row: ResultRow) -> bool:
        return float(np.mean(row.path_valid_mass < self.path_mass)) > self.max_fraction


# ------------------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class Ranks:
    """This process's place in a torchrun launch (RANK / WORLD_SIZE; one process without them)."""

    rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> Ranks:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))

    def owns(self, position: int) -> bool:
        return position % self.world_size == self.rank

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def from_rank0(self, value: Any) -> Any:
        """`value` as computed on rank 0, on every rank."""
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


@contextmanager
def process_group(ranks: Ranks) -> Iterator[None]:
    """A gloo process group for barriers and broadcasts when several ranks run (CPU-only is enough)."""
    if ranks.world_size == 1 or dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", rank=ranks.rank, world_size=ranks.world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def result_row(position: int, question: MCQuestion, result: MethodResult, seconds: float) -> ResultRow:
    """A method's result on a question in storable form (direct query: valid_mass as a [1, 1] array)."""
    traj = result.trajectories

    def array(tensor: torch.Tensor | None) -> np.ndarray | None:
        return None if tensor is None else tensor.detach().cpu().numpy()

    return ResultRow(
        question_id=question.id,
        method=result.method.name,
        position=position,
        target=question.answer_index,
        num_labels=question.num_choices,
        probs=array(result.probs.double()),
        valid_mass=array(traj.valid_mass) if traj is not None else np.array([[result.valid_mass]]),
        answers=array(traj.answers) if traj is not None else None,
        seeds=array(traj.seeds) if traj is not None else None,
        thetas=array(traj.thetas) if traj is not None else None,
        seconds=seconds,
        alternatives={name: array(probs.double()) for name, probs in result.alternatives.items()},
    )


def question_rows(
    batch: Sequence[tuple[int, MCQuestion]],
    methods: Sequence[Method],
    config: EvalConfig,
    lm: LanguageModel,
    adapter_lm: LanguageModel | None = None,
) -> list[ResultRow]:
    """Run `methods` on a batch of (position, question): the base-model methods in one `run_methods_many` call
    (one prefill per prompt, the PPR variants of every question advancing together), the AM-PPR methods in
    another on the adapter. Each method draws from `make_generator(seed, question id, method name)`, so the
    results do not depend on the batch; each row records its share of the wall time of the call."""
    tuned = [m for m in methods if m.needs_adapter]
    if tuned and adapter_lm is None:
        raise ValueError(f"{', '.join(m.name for m in tuned)} need an adapter")
    questions = [question for _, question in batch]
    rows = []
    for model, group, context in (
        (lm, [m for m in methods if not m.needs_adapter], base_model(adapter_lm)),
        (adapter_lm, tuned, nullcontext()),
    ):
        if not group:
            continue
        with context:
            start = perf_counter()
            results = run_methods_many(model, questions, group, config.paths, config.steps, config.seed,
                                       config.template, config.template_ending)
            seconds = (perf_counter() - start) / len(batch)
        rows += [
            result_row(position, question, result, seconds)
            for (position, question), question_results in zip(batch, results, strict=True)
            for result in question_results
        ]
    return rows


def questions_per_batch(config: EvalConfig, device: torch.device) -> int:
    """`batch_questions`, or when 0: 16 on a GPU (many paths per forward pass keep it busy), 1 on the CPU (where
    a batch of one question's paths already fills the cores)."""
    return config.batch_questions or (16 if device.type == "cuda" else 1)


def load_questions(config: EvalConfig) -> list[MCQuestion]:
    questions = load_dataset(config.dataset, split=config.split, data_dir=config.data_dir, n=config.n,
                             seed=config.seed)
    if not questions or not isinstance(questions[0], MCQuestion):
        raise ValueError(f"dataset {config.dataset!r} has no multiple-choice questions to evaluate")
    return questions  # type: ignore[return-value]


def prompt_positions(lm: LanguageModel, question: MCQuestion, methods: Sequence[Method], steps: int, template: str,
                     ending: str) -> int:
    """Positions the longest of `methods` fills on `question`: its prompt, then (PPR) m seeds and N answers."""
    needed = [len(direct_tokens(lm, question, ending).prompt_ids)] if not all(m.resamples for m in methods) else []
    resampling = [m for m in methods if m.resamples]
    if resampling:
        tokens = ppr_tokens(lm, question, template, ending=ending)
        answers = max(m.num_seeds for m in resampling) + steps
        needed.append(len(tokens.prompt_ids) + answers * tokens.step_length)
    return max(needed)


def split_long_prompts(
    lm: LanguageModel,
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    steps: int,
    template: str,
    ending: str,
    skip: bool,
) -> tuple[list[MCQuestion], list[MCQuestion]]:
    """(questions that fit the model's context, questions that do not); with `skip` false a question that does not
    fit is a UserError naming it. Models without `max_position_embeddings` fit everything."""
    limit = getattr(lm.model.config, "max_position_embeddings", None)
    if limit is None:
        return list(questions), []
    kept, skipped = [], []
    for question in questions:
        needed = prompt_positions(lm, question, methods, steps, template, ending)
        if needed <= limit:
            kept.append(question)
        elif skip:
            skipped.append(question)
        else:
            raise UserError(f"question {question.id} ({question.source or 'no source'}) needs {needed} positions "
                            f"(prompt, seeds and -N {steps} answers) but {lm.name} has {limit} "
                            "(max_position_embeddings); shorten it, lower -N/--steps, or pass --skip-long-prompts")
    return kept, skipped


def open_run_store(path: Path, identity: Mapping[str, Any], ranks: Ranks) -> RunStore:
    """Rank 0 creates the store and writes (or checks) the run's identity; the others open it afterwards.
    Every rank raises the same StoreError if rank 0's check failed."""
    error = None
    if ranks.rank == 0:
        try:
            with RunStore.open(path) as store:
                store.ensure_config(identity)
        except StoreError as err:
            error = str(err)
    error = ranks.from_rank0(error)
    if error:
        raise StoreError(error)
    return RunStore.open(path, create=False)


def evaluate(config: EvalConfig, out: str | Path, progress: bool = True, ranks: Ranks | None = None) -> Path:
    """Run every (question, method) of `config` not yet stored in `<out>/run.sqlite`; return the store path.

    Resumable: a question's methods are committed together, so a killed run leaves whole questions and the
    re-run computes the others exactly as an uninterrupted run would. Shardable: under torchrun each rank
    takes its share of the questions; all ranks have finished when this returns. Results are bit-for-bit
    reproducible at a fixed number of CPU threads per process (torchrun workers use one).
    """
    ranks = ranks or Ranks.from_env()
    path = Path(out) / STORE_FILE
    questions = load_questions(config)
    methods = config.method_list
    check_device(config.device)
    check_model(config.model)
    # The store is written only once model and data have loaded, so a failed start leaves no run behind.
    lm = load_model(config.model, device=config.device, dtype=config.dtype,
                    attn_implementation=config.attn_implementation, device_map=config.device_map)
    adapter_lm = load_adapter(lm, config.adapter) if config.adapter else None
    questions, skipped = split_long_prompts(lm, questions, methods, config.steps, config.template,
                                            config.template_ending, config.skip_long_prompts)
    if skipped and ranks.rank == 0:
        print(f"skipping {len(skipped)} of {len(questions) + len(skipped)} questions whose prompt is longer than the "
              f"model's context: {', '.join(q.id for q in skipped)}", file=sys.stderr)
    with process_group(ranks), open_run_store(path, config.identity(questions, skipped), ranks) as store:
        done = store.done()
        mine = [(i, q) for i, q in enumerate(questions) if ranks.owns(i)]
        todo = [(i, q) for i, q in mine if any((q.id, m.name) not in done for m in methods)]
        with tqdm(total=len(mine), initial=len(mine) - len(todo), unit="question", desc=config.dataset,
                  disable=not progress or ranks.rank != 0, dynamic_ncols=True) as bar:
            size = questions_per_batch(config, lm.device)
            for chunk in (todo[i : i + size] for i in range(0, len(todo), size)):
                done = store.done()  # another process on this directory may have stored some meanwhile
                pending: dict[tuple[str, ...], list[tuple[int, MCQuestion]]] = {}
                for position, question in chunk:
                    missing = tuple(m.name for m in methods if (question.id, m.name) not in done)
                    if missing:
                        pending.setdefault(missing, []).append((position, question))
                for names, batch in pending.items():
                    store.add(question_rows(batch, [parse_method(n) for n in names], config, lm, adapter_lm))
                bar.update(len(chunk))
        ranks.barrier()
    return path


# ------------------------------------------------------------------------------------------ scoring

ESTIMATOR_TITLES = {"q_star_rb": "RB", "theta_1": "θ̂_1"}
#: The estimator behind each method's own estimate (DESIGN §5).
METHOD_ESTIMATOR = {"ppr": "q_star", "am-ppr": "theta_1", "direct": "direct"}


@dataclass(frozen=True)
class MethodScore:
    """Metrics of one method (or one of its alternative estimators) over the questions passing QC.

    `summary` is `metrics.summarize` on the kept questions (None when QC excluded all of them); `label_mass` is
    the mean `valid_mass` over all of the method's questions, excluded ones included.
    """

    method: Method
    estimator: str | None  # None: the method's own estimate; else an alternative's name (e.g. "q_star_rb")
    summary: dict[str, Any] | None
    total: int
    excluded: int
    probs: list[np.ndarray] = field(repr=False, default_factory=list)
    targets: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    label_mass: float = math.nan

    @property
    def title(self) -> str:
        return self.method.title + (f" ({ESTIMATOR_TITLES.get(self.estimator, self.estimator)})"
                                    if self.estimator else "")

    @property
    def estimator_name(self) -> str:
        return self.estimator or METHOD_ESTIMATOR[self.method.kind]

    @property
    def n(self) -> int:
        return self.total - self.excluded

    @property
    def confidence(self) -> float:
        """Mean max_a q(a) over the kept questions (NaN when there are none)."""
        return float(np.mean([p.max() for p in self.probs])) if self.probs else math.nan

    @property
    def predicted(self) -> str:
        """How often each option is the argmax over the kept questions, e.g. `C:2 E:98` (options A, B, …)."""
        counts = np.bincount([int(np.argmax(p)) for p in self.probs], minlength=1)
        return " ".join(f"{chr(ord('A') + i)}:{c}" for i, c in enumerate(counts) if c)


def score_rows(
    rows: Sequence[ResultRow], qc: QualityControl | None = None, n_resamples: int = 1000, seed: int = 0
) -> list[MethodScore]:
    """Per method in table order: its estimate, then its alternatives, scored on the questions that pass
    `qc` with bootstrap intervals over questions. Undefined metrics (AUC with one class) are NaN."""
    qc = qc or QualityControl()
    by_method: dict[str, list[ResultRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    scores = []
    for name in canonical_methods(list(by_method)) if by_method else ():
        group = by_method[name]
        kept = [row for row in group if not qc.excludes(row)]
        label_mass = float(np.mean([row.valid_mass_mean for row in group]))
        estimators = sorted({alt for row in group for alt in row.alternatives})
        for estimator in [None, *estimators]:
            probs = [row.probs if estimator is None else row.alternatives[estimator] for row in kept]
            targets = np.array([row.target for row in kept], dtype=np.int64)
            summary = None
            if kept:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MetricWarning)
                    try:
                        summary = summarize(probs, targets, n_resamples=n_resamples, seed=seed)
                    except ValueError as err:
                        raise corrupt_row(kept, probs, estimator, err) from err
            scores.append(MethodScore(parse_method(name), estimator, summary, len(group), len(group) - len(kept),
                                      probs, targets, label_mass))
    return scores


def corrupt_row(
    rows: Sequence[ResultRow], probs: Sequence[np.ndarray], estimator: str | None, err: ValueError
) -> StoreError:
    """A StoreError naming the first row whose estimate is not a probability vector over its options (`err`, what
    the metrics said, when each row is one on its own)."""
    def valid(row: ResultRow, p: np.ndarray) -> bool:
        try:
            summarize([p], [row.target], n_resamples=1)
        except ValueError:
            return False
        return True

    bad = next(((row, p) for row, p in zip(rows, probs, strict=True) if not valid(row, p)), None)
    if bad is None:
        return StoreError(f"the stored results of method {rows[0].method} cannot be scored: {err}")
    row, p = bad
    return StoreError(f"the stored {estimator or 'estimate'} of question {row.question_id!r}, method {row.method} is "
                      f"not a probability vector over its {row.num_labels} options (target {row.target}): {p.tolist()}")


def score_results(
    results: Mapping[str, Sequence[MethodResult]],
    questions: Sequence[MCQuestion],
    qc: QualityControl | None = None,
    n_resamples: int = 1000,
) -> list[MethodScore]:
    """`score_rows` for in-memory results: {method name: one MethodResult per question, in order}."""
    rows = [result_row(i, q, r, math.nan) for per_question in results.values()
            for i, (q, r) in enumerate(zip(questions, per_question, strict=True))]
    return score_rows(rows, qc, n_resamples)

