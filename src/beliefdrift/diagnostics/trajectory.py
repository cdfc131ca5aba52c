"""Per-question drift quantities of PPR trajectories: marginal drift of θ_n and the c.i.d. check (paper Figure 1),
and their summary over questions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from beliefdrift.diagnostics.cid import CID_ALPHA, cid_check
from beliefdrift.diagnostics.marginal import marginal_drift, marginal_shift
from beliefdrift.engine.methods import Method
from beliefdrift.engine.resampling import PPRRequest, QuestionRunner, Trajectories, make_generator, sample_many
from beliefdrift.metrics.stats import mean_std


def trajectory_quantities_many(
    units: Sequence[tuple[QuestionRunner, Method]], paths: int, steps: int, seed: int
) -> list[dict[str, Any]]:
    """Marginal drift and c.i.d. check of J × N PPR paths of each (runner, method) unit, in order (the generator of
    `run_methods`, so the same paths), their paths sampled together (`unit_trajectories`); each unit's c.i.d.
    bootstrap draws from its own generator too."""
    generators = [make_generator(seed, runner.question.id, method.name) for runner, method in units]
    return [
        _quantities(trajectories, runner.question.id, method, seed)
        for (runner, method), trajectories in zip(units, unit_trajectories(units, paths, steps, generators),
                                                  strict=True)
    ]


def unit_trajectories(
    units: Sequence[tuple[QuestionRunner, Method]], paths: int, steps: int, generators: Sequence[torch.Generator]
) -> list[Trajectories]:
    """J × N PPR paths of each (runner, method) unit, in order, drawn from its generator in `generators`; the paths
    of all units with the same number of seeds advance together (`sample_many`: one forward pass per step, one batch
    per seed count and number of options; mixing seed counts would left-pad paths, which changes θ's float
    rounding). A unit's paths do not depend on which units share the call: bit for bit on the CPU in float32
    when each unit's J is a multiple of 4 (the CPU matrix product rounds rows of an incomplete 4-row block apart),
    else up to float rounding.

    One model per call: every runner must hold the same `LanguageModel`, used in one state, so base-model and
    adapter (AM-PPR) methods go in separate calls (the base ones inside `adapters.base_model`); a mix is a
    ValueError. Units of one question should share one runner (one prefill of its prompt).
    """
    if not units:
        return []
    lm = units[0][0].lm
    if any(runner.lm is not lm for runner, _ in units):
        raise ValueError("unit_trajectories: every runner must hold the same model (one call per model)")
    if len({method.needs_adapter for _, method in units}) > 1:
        raise ValueError("unit_trajectories: base-model and adapter methods need separate calls")
    batches: dict[int, dict[int, tuple[QuestionRunner, list[PPRRequest]]]] = {}  # seeds -> runner -> its requests
    for (runner, method), generator in zip(units, generators, strict=True):
        jobs = batches.setdefault(method.num_seeds, {})
        jobs.setdefault(id(runner), (runner, []))[1].append(PPRRequest(paths, steps, generator, method.num_seeds))
    sampled = {
        (seeds, key): iter(trajectories)
        for seeds, jobs in batches.items()
        for key, trajectories in zip(jobs, sample_many(list(jobs.values())), strict=True)
    }
    return [next(sampled[method.num_seeds, id(runner)]) for runner, method in units]


def _quantities(traj: Trajectories, question_id: str, method: Method, seed: int) -> dict[str, Any]:
    """Marginal drift and c.i.d. check of one unit's trajectories, the bootstrap with its own generator."""
    drift = marginal_drift(traj)
    cid = cid_check(traj.answers, traj.num_labels, make_generator(seed, question_id, method.name, "cid"),
                    start=traj.thetas[:, 0])
    return {
        "marginal_mean": drift.mean.tolist(),
        "marginal_std": drift.std.tolist(),
        "marginal_shift": marginal_shift(drift).tolist(),
        "valid_mass": float(traj.valid_mass.mean()),
        "cid_difference": cid.difference.tolist(),
        "cid_low": cid.low.tolist(),
        "cid_high": cid.high.tolist(),
        "cid_l1": cid.l1,
        "cid_p": cid.p,
        "cid_min_p": cid.smallest_p,
        "cid_consistent": cid.consistent,
    }


def cid_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """‖D̄‖₁ mean ± std over questions, how many questions the c.i.d. check rejects and how many it could not reject
    whatever their last answers (smallest attainable p > `CID_ALPHA`)."""
    mean, std = mean_std([r["cid_l1"] for r in records], ddof=1)
    return {"cid_l1_mean": float(mean), "cid_l1_std": float(std),
            "cid_rejected": sum(not r["cid_consistent"] for r in records),
            "cid_untestable": sum(r["cid_min_p"] > CID_ALPHA for r in records), "questions": len(records)}
