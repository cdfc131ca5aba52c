"""The chain-of-thought drift experiment: per question, R rollouts of N thought–answer pairs with and
without reasoning seeding, their centroid-cosine curve and answers; results in the run store (one record set per
question × condition, resume-safe), a summary over questions and the paper-style figure.

Reasoning seeding (SEED_m): for each rollout, m pairs are drawn i.i.d. from the direct chain-of-thought
prompt and prefilled, rendered well-formed, as the rollout's first m pairs. Both conditions use the same
pairs prompt, asking for N + m pairs, and are decoded together in one batch on one prompt cache; each
condition draws from its own random stream, derived from (seed, question id, condition).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from beliefdrift.backend import LanguageModel
from beliefdrift.backend.loading import model_from
from beliefdrift.backend.sampling import NucleusSampler
from beliefdrift.config.reasoning import ReasoningConfig
from beliefdrift.cot.answers import MIN_PARSED, answer_totals, answer_view, few_parsed, majority_accuracy
from beliefdrift.cot.drift import CurveStats, centroids, cosine_matrix, curve_stats, lag_curve
from beliefdrift.cot.embeddings import SentenceEmbedder, pair_embeddings
from beliefdrift.cot.generation import (
    DecodeConfig,
    PromptCache,
    Rollout,
    generate_rollouts,
    nucleus_sampler,
    render_seeds,
    seed_pair,
)
from beliefdrift.cot.parser import Pair
from beliefdrift.cot.plot import plot_centroid_drift
from beliefdrift.cot.task import ReasoningTask, pairs_template
from beliefdrift.data.loaders import MathProblem
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import load_dataset, require_kind
from beliefdrift.engine.resampling import make_generator
from beliefdrift.errors import UserError
from beliefdrift.files import write_atomic
from beliefdrift.prompts import chat_context
from beliefdrift.runs.distributed import Ranks
from beliefdrift.runs.identity import run_identity
from beliefdrift.runs.loop import run_loop
from beliefdrift.runs.records import stored_records

if TYPE_CHECKING:
    from beliefdrift.config.reasoning import ReasoningCommandConfig

log = logging.getLogger(__name__)


def decode_config(config: ReasoningConfig, num_pairs: int, max_new_tokens: int) -> DecodeConfig:
    """How rollouts of `num_pairs` pairs within `max_new_tokens` are decoded under `config`."""
    return DecodeConfig(num_pairs, max_new_tokens, config.guided, config.max_solution_tokens,
                        nucleus=(config.temperature, config.top_p))


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _pair_record(pair: Pair, task: ReasoningTask) -> dict:
    return {
        "solution": pair.solution,
        "answer": pair.answer,
        "normalized": task.normalize(pair.answer),
        "issues": list(pair.issues),
    }


def draw_seed_pairs(
    lm: LanguageModel, task: ReasoningTask, count: int, config: ReasoningConfig
) -> tuple[list[Pair], list[Rollout]]:
    """`count` pairs i.i.d. from the direct chain-of-thought prompt (one rollout each, one batch)."""
    cache = PromptCache.from_text(lm, chat_context(lm.tokenizer, task.cot_prompt()))
    sampler = nucleus_sampler(config.temperature, config.top_p, make_generator(config.seed, task.id, "cot-seeds"))
    rollouts = generate_rollouts(
        cache, [""] * count, decode_config(config, 1, config.seed_max_new_tokens), sampler, collect_hidden=False
    )
    return [seed_pair(r) for r in rollouts], rollouts


def condition_result(
    rollouts: Sequence[Rollout], embeddings: Sequence[torch.Tensor], task: ReasoningTask, config: ReasoningConfig
) -> dict:
    """Everything stored for one condition of one question (JSON-ready)."""
    points, counts = centroids(embeddings, config.pairs)
    matrix = cosine_matrix(points)
    issues: Counter[str] = Counter()
    records = []
    for rollout in rollouts:
        issues.update(rollout.parse.issue_counts())
        records.append({
            "seed_text": rollout.seed_text,
            "text": rollout.text,
            "stop": rollout.stop,
            "num_tokens": len(rollout.token_ids),
            "forced_tokens": rollout.forced,
            "capped": rollout.capped,
            "pairs": [_pair_record(p, task) for p in rollout.pairs],
            "malformed": rollout.parse.malformed,
            "dropped_chars": rollout.parse.dropped_chars,
            "issues": rollout.parse.issue_counts(),
        })
    answers = [[task.normalize(p.answer) for p in r.pairs] for r in rollouts]
    return {
        "rollouts": records,
        "pairs_per_rollout": [len(r.pairs) for r in rollouts],
        "malformed": sum(r.parse.malformed for r in rollouts),
        "issues": dict(sorted(issues.items())),
        "stops": dict(Counter(r.stop for r in rollouts)),
        "capped": sum(r.capped for r in rollouts),
        "centroid_counts": counts.tolist(),
        "cosine_matrix": [[_finite(v) for v in row] for row in matrix.tolist()],
        "curve": [_finite(v) for v in lag_curve(matrix, config.tau)],
        "answers": answer_view(answers, task.gold),
    }


def run_question(
    lm: LanguageModel, task: ReasoningTask, config: ReasoningConfig, embedder: SentenceEmbedder | None = None
) -> dict:
    """Both conditions for one question, decoded together on one prefilled pairs prompt."""
    start = time.perf_counter()
    R, m = config.rollouts, config.seeds
    cache = PromptCache.from_text(lm, chat_context(lm.tokenizer, task.pairs_prompt(config.pairs + m)))
    seed_pairs, seed_rollouts = draw_seed_pairs(lm, task, R * m, config) if m else ([], [])
    seed_texts = [""] * R + [render_seeds(seed_pairs[r * m : (r + 1) * m]) for r in range(R if m else 0)]
    samplers = [
        nucleus_sampler(config.temperature, config.top_p, make_generator(config.seed, task.id, key))
        for key, _, _ in config.conditions
    ]
    rollouts = generate_rollouts(
        cache,
        seed_texts,
        decode_config(config, config.pairs, config.max_new_tokens),
        NucleusSampler.in_blocks(samplers, R),
        collect_hidden=embedder is None,
    )
    embeddings = pair_embeddings(rollouts, embedder)
    conditions = {}
    for i, (key, title, num_seeds) in enumerate(config.conditions):
        block = slice(i * R, (i + 1) * R)
        result = {"title": title, "num_seeds": num_seeds}
        result |= condition_result(rollouts[block], embeddings[block], task, config)
        if num_seeds:
            result["seeds"] = [[_pair_record(p, task) for p in seed_pairs[r * m : (r + 1) * m]] for r in range(R)]
            result["seed_malformed"] = sum(not p.well_formed or r.stop != "pairs"
                                           for p, r in zip(seed_pairs, seed_rollouts, strict=True))
        conditions[key] = result
    task_record = {"id": task.id, "text": task.text, "gold": task.gold, "kind": task.kind, "template": task.template}
    return {"task": task_record, "conditions": conditions, "seconds": time.perf_counter() - start}


def _units(result: dict) -> dict[str, dict]:
    """A question's result as store units: {condition: its quantities + the task and the question's time}."""
    return {key: {**cond, "task": result["task"], "seconds": result["seconds"]}
            for key, cond in result["conditions"].items()}


def _from_units(units: dict[str, dict]) -> dict:
    """The inverse of `_units`."""
    first = next(iter(units.values()))
    conditions = {key: {k: v for k, v in unit.items() if k not in ("task", "seconds")} for key, unit in units.items()}
    return {"task": first["task"], "conditions": conditions, "seconds": first["seconds"]}


def check_context(lm: LanguageModel, tasks: Sequence[ReasoningTask], config: ReasoningConfig) -> None:
    """Refuse, before any work, a task whose pairs prompt + m seed pairs (at most `seed_max_new_tokens` each) +
    `max_new_tokens` generated tokens exceed the model's positions (`LanguageModel.context_length`, when known)."""
    limit = lm.context_length
    if limit is None:
        return
    for task in tasks:
        prompt = lm.tokenizer(chat_context(lm.tokenizer, task.pairs_prompt(config.pairs + config.seeds)),
                              add_special_tokens=False)["input_ids"]
        needed = len(prompt) + config.seeds * config.seed_max_new_tokens + config.max_new_tokens
        if needed > limit:
            raise UserError(f"question {task.id} needs up to {needed} positions (prompt {len(prompt)}, "
                            f"{config.seeds} seeds × --seed-max-new-tokens {config.seed_max_new_tokens}, "
                            f"--max-new-tokens {config.max_new_tokens}) but {lm.name} has {limit} "
                            "(max_position_embeddings); lower --max-new-tokens, --seed-max-new-tokens or -m")


def run_experiment(
    lm: LanguageModel,
    tasks: Iterable[ReasoningTask],
    config: ReasoningConfig,
    out: Path,
    identity: Mapping[str, Any] | None = None,
    progress: bool = True,
    ranks: Ranks | None = None,
) -> dict | None:
    """Run every task not finished yet in `out`'s run store through the run loop (`runs.loop.run_loop`: resumable,
    each question's conditions stored together, the tasks sharded over torchrun ranks); the store must hold the
    same run `identity`, by default `config` itself (a different one is a StoreError). Then write records.csv,
    summary.json and the figure and return the summary; on a rank other than 0, write nothing and return None."""
    tasks = list(tasks)
    ranks = ranks or Ranks.from_env()
    check_context(lm, tasks, config)
    identity = dict(identity or {"command": "reasoning", "config": asdict(config)})
    keys = [key for key, _, _ in config.conditions]
    embedder = SentenceEmbedder(device=lm.device) if config.embedding == "sentence" else None

    def compute(batch: Sequence[tuple[int, ReasoningTask]], names: tuple[str, ...]) -> dict[str, dict]:
        return {task.id: _units(run_question(lm, task, config, embedder)) for _, task in batch}

    run_loop(out, identity, tasks, keys, compute, ranks=ranks, progress=progress, desc="reasoning",
             kind="condition")
    if ranks.rank != 0:
        return None
    stored = stored_records(out, [task.id for task in tasks], keys)
    results = [_from_units({key: stored[task.id, key] for key in keys}) for task in tasks]
    summary = identity | summarize_conditions(results, config)
    count = f"{len(results)} question" + ("s" if len(results) != 1 else "")
    title = f"{identity.get('dataset', 'reasoning')}: {count}, R={config.rollouts}"
    curves = {cond["title"]: curve_stats_of(results, key) for key, cond in summary["conditions"].items()}
    summary["figure"] = [str(p) for p in plot_centroid_drift(curves, config.tau, out / "centroid_drift", title)]
    write_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def reasoning_tasks(settings: ReasoningCommandConfig,
                    given: Sequence[Any] | None = None) -> tuple[list[ReasoningTask], list[Any], str]:
    """The tasks of `beliefdrift reasoning`'s settings (of the items `given`, the Python API's `questions=`, else of
    its dataset), the items they come from and the pairs template."""
    items = require_kind(given, settings.dataset, "reasoning", (MCQuestion, MathProblem), flag="questions=") if (
        given is not None) else load_dataset(settings.dataset, split=settings.split, data_dir=settings.data_dir,
                                             n=settings.n, seed=settings.seed, fields=settings.fields)
    template = settings.template or pairs_template(settings.dataset, items)
    return [ReasoningTask.from_item(item, template) for item in items], items, template


def run_reasoning(settings: ReasoningCommandConfig, *, questions: Sequence[Any] | None = None,
                  lm: LanguageModel | None = None, progress: bool = True) -> dict | None:
    """`beliefdrift reasoning`: its questions (`questions` when given as objects) and model (`lm` when loaded
    already; prepared for `cuda_graphs`), pinned to its run identity, through `run_experiment` into `settings.out`; the
    summary (None on a rank other than 0)."""
    config = settings.experiment
    tasks, items, template = reasoning_tasks(settings, questions)
    if lm is None:
        log.info("loading %s ...", settings.model)
        lm = model_from(settings)
    lm = lm.prepared(cuda_graphs=settings.cuda_graphs)
    log.info("%d %s questions, J=%d, N=%d, m=%d, τ=%d, %s format (%s, %s)", len(tasks), settings.dataset,
             config.rollouts, config.pairs, config.seeds, config.tau, settings.format, lm.dtype, lm.device)
    identity = run_identity("reasoning", settings, items, template=template, lm=lm)
    return run_experiment(lm, tasks, config, settings.out, identity, progress=progress)


def curve_stats_of(results: Sequence[dict], key: str) -> CurveStats:
    """Mean ± std over questions of condition `key`'s curve."""
    return curve_stats([r["conditions"][key]["curve"] for r in results])


def summarize_conditions(results: Sequence[dict], config: ReasoningConfig) -> dict:
    """Per condition: the curve's mean ± std over questions, majority-answer accuracy, answer and format
    statistics; for the seeded condition also, per n, on how many questions its curve lies above the unseeded one."""
    conditions = {}
    for key, title, seeds in config.conditions:
        stats = curve_stats_of(results, key)
        per_question = [r["conditions"][key] for r in results]
        issues: Counter[str] = Counter()
        stops: Counter[str] = Counter()
        for cond in per_question:
            issues.update(cond["issues"])
            stops.update(cond["stops"])
        totals: Counter[str] = Counter()
        for cond in per_question:
            totals.update(answer_totals(cond["answers"]))
        conditions[key] = {
            "title": title,
            "curve_mean": [_finite(v) for v in stats.mean],
            "curve_std": [_finite(v) for v in stats.std],
            "curve_count": stats.count,
            "majority_accuracy": majority_accuracy([c["answers"] for c in per_question]),
            "pairs": sum(sum(c["pairs_per_rollout"]) for c in per_question),
            "malformed": sum(c["malformed"] for c in per_question),
            "issues": dict(sorted(issues.items())),
            "stops": dict(sorted(stops.items())),
            "capped": sum(c["capped"] for c in per_question),
            **totals,
        }
        conditions[key]["few_parsed"] = few_parsed(totals["valid_answers"], conditions[key]["pairs"])
        if seeds:
            conditions[key]["above_unseeded"] = _above(results, key, "ppr")
    return {"questions": [r["task"]["id"] for r in results], "min_parsed": MIN_PARSED, "conditions": conditions}


def _above(results: Sequence[dict], key: str, reference: str) -> list[int]:
    """Per n: the questions on which condition `key`'s curve is above `reference`'s (both defined)."""
    pairs = [zip(r["conditions"][key]["curve"], r["conditions"][reference]["curve"], strict=True) for r in results]
    return [sum(a is not None and b is not None and a > b for a, b in column) for column in zip(*pairs, strict=True)]


#: The caption of `summary_markdown`'s table: each column said once.
REASONING_CAPTION = ("**Chain-of-thought drift.** c_n = cos(h̄_n, h̄_{n+τ}), the cosine between the centroids over "
                     "rollouts of the embeddings of thought–answer pairs n and n + τ, mean over questions: c_1 at the "
                     "first pair, c_last at the last n with a value (lower: the reasoning drifts further); majority "
                     "acc.: accuracy of each question's majority answer over its rollouts (parsed answers only); "
                     "pairs: thought–answer pairs generated; parsed: how many of their answers parse (the rest cannot "
                     "vote); malformed: pairs off the <sol>…</sol><ans>…</ans> format.")


def summary_markdown(summary: dict) -> str:
    """A short titled table: per condition the mean curve's first and last value, majority accuracy, the pairs and
    how many of their answers parse, format; ‡ on the figures of a condition where too few parse (`few_parsed`)."""
    lines = [REASONING_CAPTION, "", "| condition | c_1 | c_last | majority acc. | pairs | parsed | malformed |",
             "|---|---|---|---|---|---|---|"]
    marked = []
    for cond in summary["conditions"].values():
        curve = [v for v in cond["curve_mean"] if v is not None]
        mark = " ‡" if cond.get("few_parsed") else ""
        first, last = (f"{curve[0]:.3f}{mark}", f"{curve[-1]:.3f}{mark}") if curve else ("–", "–")
        accuracy = cond["majority_accuracy"]["overall"]
        shown = "–" if accuracy is None else f"{accuracy:.2f}{mark}"
        parsed = f"{cond['valid_answers']}/{cond['pairs']}" if "valid_answers" in cond else "–"
        lines.append(f"| {cond['title']} | {first} | {last} | {shown} | {cond['pairs']} | {parsed} | "
                     f"{cond['malformed']} |")
        marked += [cond["title"]] * bool(mark)
    if marked:
        share = summary.get("min_parsed", MIN_PARSED)
        lines += ["", f"‡ {', '.join(marked)}: fewer than {100 * share:g}% of the pairs' answers parse, so its c_n and "
                      "majority accuracy rest on the few that do."]
    return "\n".join(lines)


DEMO_CONFIG = ReasoningConfig(rollouts=4, pairs=4, seeds=2, tau=1, max_new_tokens=256, seed_max_new_tokens=64,
                              temperature=0.7, max_solution_tokens=32)


def demo_section(lm: LanguageModel, out: Path, seed: int = 0, num_questions: int = 3,
                 config: ReasoningConfig | None = None) -> str:
    """The chain-of-thought extension in miniature for `beliefdrift demo`: `DEMO_CONFIG` (R=4 rollouts of
    N=4 guided pairs, with and without 2 reasoning seeds, τ=1, T=0.7) on `num_questions` demo questions
    with the MCQA pairs prompt. Writes JSON and the figure under `out`; returns a Markdown table."""
    questions = load_dataset("demo", n=num_questions, seed=seed)
    tasks = [ReasoningTask.from_item(q) for q in questions]
    config = config or replace(DEMO_CONFIG, seed=seed)
    summary = run_experiment(lm, tasks, config, out, {"command": "demo", "model": lm.name, "dataset": "demo",
                                                      "config": asdict(config)}, progress=False)
    assert summary is not None, "the demo runs in one process: rank 0, which returns the summary"
    return summary_markdown(summary)
