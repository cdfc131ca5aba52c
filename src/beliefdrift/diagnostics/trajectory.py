"""Per-question drift quantities of PPR trajectories: marginal drift of θ_n and the c.i.d. check (paper Figure 1),
and their summary over questions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from beliefdrift.diagnostics.cid import cid_check
from beliefdrift.diagnostics.marginal import marginal_drift, marginal_shift
from beliefdrift.methods import Method
from beliefdrift.report.text import mean_std
from beliefdrift.resampling import PPRRequest, QuestionRunner, Trajectories, make_generator, sample_many


def trajectory_quantities(runner: QuestionRunner, method: Method, paths: int, steps: int, seed: int) -> dict[str, Any]:
    """Marginal drift and c.i.d. check of J × N PPR paths (the generator of `run_methods`, so the same paths)."""
    return trajectory_quantities_many([(runner, method)], paths, steps, seed)[0]


def trajectory_quantities_many(
    units: Sequence[tuple[QuestionRunner, Method]], paths: int, steps: int, seed: int
) -> list[dict[str, Any]]:
    """`trajectory_quantities` of each (runner, method) unit, in order, with the J × N PPR paths of all units that
    have the same number of seeds advanced together (`sample_many`: one forward pass per step, one batch per seed
    count and number of options; mixing seed counts would left-pad paths, which changes θ's float rounding). Each
    unit draws its paths and its c.i.d. bootstrap from its own generators, so its quantities do not depend on which
    units share the call: bit for bit on the CPU in float32.

    One model per call: every runner must hold the same `LanguageModel`, used in one state, so base-model and
    adapter (AM-PPR) methods go in separate calls (the base ones inside `adapters.base_model`); a mix is a
    ValueError. Units of one question should share one runner (one prefill of its prompt).
    """
    if not units:
        return []
    lm = units[0][0].lm
    if any(runner.lm is not lm for runner, _ in units):
        raise ValueError("trajectory_quantities_many: every runner must hold the same model (one call per model)")
    if len({method.needs_adapter for _, method in units}) > 1:
        raise ValueError("trajectory_quantities_many: base-model and adapter methods need separate calls")
    # One engine batch per seed count: paths with fewer seeds would be left-padded, and padding changes θ's rounding.
    batches: dict[int, dict[int, tuple[QuestionRunner, list[PPRRequest]]]] = {}  # seeds -> runner -> its requests
    for runner, method in units:
        generator = make_generator(seed, runner.question.id, method.name)
        jobs = batches.setdefault(method.num_seeds, {})
        jobs.setdefault(id(runner), (runner, []))[1].append(PPRRequest(paths, steps, generator, method.num_seeds))
    sampled = {
        (seeds, key): iter(trajectories)
        for seeds, jobs in batches.items()
        for key, trajectories in zip(jobs, sample_many(list(jobs.values())), strict=True)
    }
    return [
        _quantities(next(sampled[method.num_seeds, id(runner)]), runner.question.id, method, seed)
        for runner, method in units
    ]


def _quantities(traj: Trajectories, question_id: str, method: Method, seed: int) -> dict[str, Any]:
    """Marginal drift and c.i.d. check of one unit's trajectories, the bootstrap with its own generator."""
    drift = marginal_drift(traj)
    cid = cid_check(traj.answers, traj.num_labels, make_generator(seed, question_id, method.name, "cid"))
    return {
        "marginal_mean": drift.mean.tolist(),
        "marginal_std": drift.std.tolist(),
        "marginal_shift": marginal_shift(drift).tolist(),
        "valid_mass": float(traj.valid_mass.mean()),
        "cid_difference": cid.difference.tolist(),
        "cid_low": cid.low.tolist(),
        "cid_high": cid.high.tolist(),
        "cid_l1": cid.l1,
        "cid_consistent": cid.consistent,
    }


def cid_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    mean, std = mean_std([r["cid_l1"] for r in records], ddof=1)
    return {"cid_l1_mean": float(mean), "cid_l1_std": float(std),
            "cid_rejected": sum(not r["cid_consistent"] for r in records), "questions": len(records)}
