"""The answer-distribution methods of the paper's tables, by name: `direct`, `ppr`, `ppr-seed<m>` and
`am-ppr` / `am-ppr-seed<m>` (the SC-tuned model, read off its first step)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from beliefdrift.backend import LanguageModel
from beliefdrift.data.question import MCQuestion
from beliefdrift.engine.estimators import first_step_estimate, martingale_posterior_mean, rao_blackwell_mean
from beliefdrift.engine.resampling import PPRRequest, QuestionRunner, Trajectories, make_generator, sample_many
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING
from beliefdrift.registry import Method, parse_method

__all__ = ["Method", "MethodResult", "parse_method", "run_methods", "run_methods_many"]


@dataclass(frozen=True)
class MethodResult:
    """One method's answer distribution for one question.

    `probs` is the method's estimate (direct θ, PPR q*, AM-PPR θ̂_1); `alternatives` holds the other
    estimators computed from the same paths (q*_RB for PPR); `valid_mass` is the mean label mass.
    """

    method: Method
    probs: torch.Tensor
    valid_mass: float
    alternatives: dict[str, torch.Tensor]
    trajectories: Trajectories | None = None


def _result(method: Method, traj: Trajectories) -> MethodResult:
    """The method's estimate from its trajectories: θ̂_1 for AM-PPR, q* (and q*_RB, θ̂_1) for PPR."""
    valid_mass = float(traj.valid_mass.mean())
    if method.spec.estimator == "theta_1":
        return MethodResult(method, first_step_estimate(traj), valid_mass, {}, traj)
    alternatives = {"q_star_rb": rao_blackwell_mean(traj), "theta_1": first_step_estimate(traj)}
    return MethodResult(method, martingale_posterior_mean(traj), valid_mass, alternatives, traj)


def _request(method: Method, num_paths: int, num_steps: int, generator: torch.Generator) -> PPRRequest:
    """AM-PPR only needs θ_0 of each (seeded) path: no answers are generated."""
    return PPRRequest(num_paths, num_steps if method.spec.generates else 0, generator, method.num_seeds)


def run_methods(
    lm: LanguageModel,
    question: MCQuestion,
    methods: Sequence[Method],
    *,
    paths: int = 8,
    steps: int = 20,
    seed: int = 0,
    template: str = DEFAULT_PPR_TEMPLATE,
    template_ending: str = DEFAULT_TEMPLATE_ENDING,
) -> list[MethodResult]:
    """All `methods` on one question with one model (see `run_methods_many`)."""
    return run_methods_many(lm, [question], methods, paths=paths, steps=steps, seed=seed, template=template,
                            template_ending=template_ending)[0]


def run_methods_many(
    lm: LanguageModel,
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    *,
    paths: int = 8,
    steps: int = 20,
    seed: int = 0,
    template: str = DEFAULT_PPR_TEMPLATE,
    template_ending: str = DEFAULT_TEMPLATE_ENDING,
) -> list[list[MethodResult]]:
    """All `methods` on each question with one model: one prefill per prompt, and the paths of every resampling
    method of every question advance together. Each method draws from its own generator (run seed, question id,
    method name), so its result does not depend on which other methods or questions ran.

    The keywords and their defaults are the CLI's (`--paths/-J`, `--steps/-N`, `--seed`, `--template`,
    `--template-ending`)."""
    runners = [QuestionRunner(lm, question, template, template_ending) for question in questions]
    resampling = [m for m in methods if m.resamples]
    jobs = [
        (runner, [_request(m, paths, steps, make_generator(seed, runner.question.id, m.name))
                  for m in resampling])
        for runner in runners
    ]
    sampled = sample_many(jobs) if resampling else [[] for _ in runners]
    results = []
    for runner, trajectories in zip(runners, sampled, strict=True):
        by_name = dict(zip((m.name for m in resampling), trajectories, strict=True))
        results.append([
            _result(m, by_name[m.name])
            if m.resamples
            else MethodResult(m, runner.direct.probs.double(), float(runner.direct.valid_mass), {})
            for m in methods
        ])
    return results
