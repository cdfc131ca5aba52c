"""`beliefdrift demo`: the paper's main observations on the bundled demo set with the default model.

Runs Direct-Query, PPR, PPR+SEED_1 and PPR+SEED_5, prints a summary table (every question, quality control's
exclusions counted) and the paper's metric tables (the questions quality control keeps),
draws the marginal drift of θ_n (the paper's Figure 1 (a)/(b)) for one question, and measures the expected
martingale drift (EMD) with and without seeding on a few questions (an emd run in `out/emd`), and the drift of
chain-of-thought trajectories in embedding space on a few more (`out/reasoning`). Each question's results are stored
in `out/run.sqlite` as it finishes, so an interrupted demo resumes where it stopped (with the same settings). Last,
it writes the run explorer over all three (`out/explorer.html`, `report --html`) and says where it is.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from beliefdrift.config.diagnostics import EMDCommandConfig
from beliefdrift.config.options import (
    MAX_QUESTIONS,
    DataOptions,
    ModelOptions,
    SamplingOptions,
    add_command,
    option,
    out_option,
    retuned,
    settings_from,
)
from beliefdrift.data.registry import load_dataset, require_kind
from beliefdrift.files import write_atomic
from beliefdrift.registry import parse_method
from beliefdrift.report.text import markdown_table, plus_minus

if TYPE_CHECKING:
    from beliefdrift.backend import LanguageModel
    from beliefdrift.data import MCQuestion
    from beliefdrift.engine.methods import Method, MethodResult
    from beliefdrift.runs.store import ResultRow

log = logging.getLogger(__name__)

DEMO_METHODS = ("direct", "ppr", "ppr-seed1", "ppr-seed5")
#: The settings that change the stored results (a resumed demo must match them).
IDENTITY_SETTINGS = ("model", "dtype", "template", "template_ending", "paths", "steps", "seed", "n")
EMD_METHODS = ("ppr", "ppr-seed5")


@dataclass(frozen=True)
class DemoConfig(ModelOptions, SamplingOptions):
    """The settings of `beliefdrift demo` (the bundled demo questions)."""

    _argument_group_name = "demo"

    n: int | None = retuned(DataOptions, "n", 20, "number of demo questions (0: all 52)")
    emd_questions: int = option(2, "questions in the EMD section (0: skip)", minimum=0, maximum=MAX_QUESTIONS)
    reasoning_questions: int = option(3, "questions in the chain-of-thought section (0: skip)", minimum=0,
                                      maximum=MAX_QUESTIONS)
    plot_question: str | None = option(None, "question id for the drift figure (unset: the first)")
    out: Path = out_option("beliefdrift-out/demo")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "demo", DemoConfig, "run the paper's methods on the bundled demo set", __doc__)
    parser.set_defaults(func=run)


def summary_rows(results: dict[str, list[MethodResult]], targets: list[int]) -> list[tuple[str, float, float, float]]:
    """(method, accuracy, mean confidence, mean valid_mass) per method (`results`: each method's `MethodResult`s);
    accuracy as Table 1 computes it (`metrics.accuracy`), on every question."""
    import torch

    from beliefdrift.metrics.functional import accuracy

    rows = []
    for per_question in results.values():
        probs = torch.stack([r.probs for r in per_question]).double()
        correct = accuracy(probs.numpy(), targets)
        confidence = probs.max(1).values.mean().item()
        valid = sum(r.valid_mass for r in per_question) / len(per_question)
        rows.append((per_question[0].method.title, correct, confidence, valid))
    return rows


def summary_table(results: dict[str, list[MethodResult]], questions: list[MCQuestion], stored: list[ResultRow]
                  ) -> str:
    """The demo's first table, titled: each method on every question before quality control, with how many questions
    quality control removes from Tables 1 and 2 (`scoring.warn_quality` says which, on stderr)."""
    from beliefdrift.runs.scoring import warn_quality

    quality = warn_quality(stored)
    excluded = {m.method: len(m.excluded) for m in quality.methods}
    rows = summary_rows(results, [q.answer_index for q in questions])
    caption = (f"**Demo summary.** Each method on all {len(questions)} questions, before quality control: accuracy "
               "(share of questions whose most probable option is the answer), mean confidence (max_a q(a)), mean "
               "valid_mass (the probability the model puts on the answer labels, over every step of every path), and "
               "QC excl. (the questions quality control removes from a method in Tables 1 and 2: those on which "
               f"{quality.qc.describe()}). Tables 1 and 2 score the kept questions only, so "
               "their accuracy differs where QC excl. is not 0.")
    return caption + "\n\n" + markdown_table(
        ["method", "accuracy", "mean confidence", "mean valid_mass", "QC excl."],
        [[title, f"{acc:.3f}", f"{conf:.3f}", f"{valid:.3f}", f"{excluded.get(name, 0)}/{len(questions)}"]
         for name, (title, acc, conf, valid) in zip(results, rows, strict=True)])


def stored_result(row: ResultRow) -> MethodResult:
    """A stored result as `run_methods` returned it (the arrays are stored bit-exact)."""
    import torch

    from beliefdrift.engine.methods import MethodResult
    from beliefdrift.engine.resampling import Trajectories

    trajectories = None if row.thetas is None else Trajectories(
        torch.from_numpy(row.answers), torch.from_numpy(row.thetas), torch.from_numpy(row.valid_mass),
        torch.from_numpy(row.seeds))
    return MethodResult(parse_method(row.method), torch.from_numpy(row.probs), row.valid_mass_mean,
                        {name: torch.from_numpy(probs) for name, probs in row.alternatives.items()}, trajectories)


def demo_results(lm: LanguageModel, questions: list[MCQuestion], methods: list[Method],
                 config: DemoConfig) -> tuple[dict[str, list[MethodResult]], list[ResultRow]]:
    """Every method's result on every question, and the stored rows; each question's stored in `out/run.sqlite` as
    it finishes: an interrupted demo resumes with the questions it had finished."""
    from beliefdrift.data.question import write_questions
    from beliefdrift.engine.methods import run_methods
    from beliefdrift.progress import progress_bar
    from beliefdrift.runs.identity import identity_hash, run_identity
    from beliefdrift.runs.scoring import result_row
    from beliefdrift.runs.store import STORE_FILE, RunStore

    identity = run_identity("demo", config, questions, only=IDENTITY_SETTINGS) | {"dataset": "demo"}
    identity["sha256"] = identity_hash(identity)
    with RunStore.open(config.out / STORE_FILE) as store:
        store.ensure_config(identity)
        write_questions(config.out, questions)  # what the explorer shows of them
        done = {qid for qid, _ in store.done()}
        for position, question in enumerate(progress_bar(questions, desc="demo", unit="question")):
            if question.id in done:
                continue
            start = time.perf_counter()
            question_results = run_methods(lm, question, methods, paths=config.paths, steps=config.steps,
                                           seed=config.seed, template=config.template,
                                           template_ending=config.template_ending)
            seconds = time.perf_counter() - start
            store.add([result_row(position, question, result, seconds) for result in question_results])
        rows = store.rows()
    results: dict[str, list[MethodResult]] = {m.name: [] for m in methods}
    for row in rows:  # in question order
        results[row.method].append(stored_result(row))
    return results, rows


def run(args: argparse.Namespace) -> int:
    from beliefdrift.backend.loading import model_from
    from beliefdrift.data.lm_eval import no_task_code
    from beliefdrift.diagnostics.marginal import marginal_drift
    from beliefdrift.report.explorer import EXPLORER_FILE, write_explorer
    from beliefdrift.report.html import environment
    from beliefdrift.report.plots import plot_marginal_drift
    from beliefdrift.report.tables import metric_table
    from beliefdrift.report.text import wrote
    from beliefdrift.runs.reasoning import demo_section as reasoning_section
    from beliefdrift.runs.store import STORE_FILE

    config = settings_from(args, DemoConfig)
    questions = require_kind(load_dataset("demo", n=config.n or None, seed=config.seed), "demo", "demo")
    methods = [parse_method(name) for name in DEMO_METHODS]
    log.info("loading %s ...", config.model)
    lm = model_from(config)
    log.info("%d questions × %d methods, J=%d paths, N=%d answers (%s, %s)", len(questions), len(methods),
             config.paths, config.steps, lm.dtype, lm.device)
    results, stored = demo_results(lm, questions, methods, config)

    table = summary_table(results, questions, stored)
    metrics = metric_table(results, questions, label="Demo")
    print(table + "\n\n" + metrics)
    config.out.mkdir(parents=True, exist_ok=True)
    sections = [table, metrics]

    index = next((i for i, q in enumerate(questions) if q.id == config.plot_question), 0)
    question = questions[index]
    shown = [results[name][index] for name in ("ppr", "ppr-seed5")]  # PPR methods: each stores its paths
    panels = [(result.method.title, marginal_drift(result.trajectories)) for result in shown
              if result.trajectories is not None]
    written = plot_marginal_drift(panels, question.labels, Path(config.out) / "marginal_drift",
                                  title=f"{question.id}: {question.stem[:70]}")
    runs = [config.out]
    if config.emd_questions:
        sections.append(emd_section(lm, questions[: config.emd_questions], config))
        runs.append(config.out / "emd")
        print(sections[-1])
    if config.reasoning_questions:
        log.info("chain-of-thought drift on %d questions ...", config.reasoning_questions)
        sections.append(reasoning_section(lm, config.out / "reasoning", config.seed, config.reasoning_questions))
        runs.append(config.out / "reasoning")
        print(sections[-1])
    write_atomic(config.out / "summary.md", "\n\n".join(sections) + "\n")
    with no_task_code():
        page = write_explorer(runs, config.out, environment=environment(), title="beliefdrift demo: run explorer")
    log.info(wrote(config.out, [f"{STORE_FILE} (the results)", "summary.md (the tables above)",
                                f"{written[0].stem}.{'/'.join(p.suffix[1:] for p in written)} (the drift of "
                                f"{question.id})",
                                *(["emd/ (its run store, summary and figures)"] if config.emd_questions else []),
                                *(["reasoning/ (its run store, summary.json and figure)"]
                                  if config.reasoning_questions else []),
                                f"{EXPLORER_FILE} (the run explorer)"]))
    log.info("explore every question, path and figure: open %s in a browser (one file, no server)", page)
    return 0


def emd_section(lm: LanguageModel, questions: list[MCQuestion], config: DemoConfig) -> str:
    """EMD‾ (L1, k = 2 … K) and EMD_k(b) of PPR with and without seeds on a few questions, stored as an emd run in
    `out/emd` (its summary and figures beside it)."""
    from beliefdrift.report.diagnostics import write_emd_report
    from beliefdrift.runs.diagnostics import run_emd

    # small enough for a laptop CPU: K = 4 (exact enumeration of 5^3 continuations), two prefix lengths, J = 8, L1
    # only, no urn floor (model, template, seed and N are the demo's)
    settings = EMDCommandConfig(**{f.name: getattr(config, f.name) for f in fields(ModelOptions)},
                                horizon=4, prefix_lengths=[0, 2], top_k=3, paths=8, burn_in=4, lookahead=4,
                                distance=["l1"], noise_floor_replicates=0, steps=config.steps, seed=config.seed,
                                dataset="demo", n=len(questions), methods=list(EMD_METHODS), out=config.out / "emd")
    log.info("EMD on %d questions (K=%d, prefixes n ∈ %s) ...", len(questions), settings.horizon,
             settings.prefix_lengths)
    run = run_emd(settings, questions=questions, lm=lm, progress=False)
    summary = write_emd_report(settings, run).summary  # what the emd command writes
    rows = [(m.title, summary[m.name]["l1"]) for m in run.methods]
    caption = (f"**Expected martingale drift (L1)** on {len(questions)} questions. EMD‾: the L1 distance between the "
               f"k-step and the one-step predictive, averaged over k = 2 … {settings.horizon} and prefixes of "
               f"{' and '.join(map(str, settings.prefix_lengths))} answers, mean ± std over questions (0 for a "
               f"martingale); EMD_{settings.lookahead}(b): the same at k = {settings.lookahead} after a prefix of b "
               f"answers sampled from the process, for b = 0 … {settings.burn_in} (the curve of the paper's Figure 3).")
    return caption + "\n\n" + markdown_table(
        ["method", "EMD‾ mean ± std", f"EMD_{settings.lookahead}(b), b = 0 … {settings.burn_in}"],
        [[title, plus_minus(row["emd_bar"], row["emd_bar_std"]), " ".join(f"{v:.3f}" for v in row["burn_in"])]
         for title, row in rows],
    )
