"""Per-question drift quantities of PPR trajectories: marginal drift of θ_n and the c.i.d. check (paper Figure 1),
and their summary over questions."""

from __future__ import annotations

from typing import Any

from beliefdrift.diagnostics.cid import cid_check
from beliefdrift.diagnostics.marginal import marginal_drift, marginal_shift
from beliefdrift.methods import Method
from beliefdrift.report.text import mean_std
from beliefdrift.resampling import QuestionRunner, make_generator


def trajectory_quantities(runner: QuestionRunner, method: Method, paths: int, steps: int, seed: int) -> dict[str, Any]:
    """Marginal drift and c.i.d. check of J × N PPR paths (the generator of `run_methods`, so the same paths)."""
    traj = runner.ppr(paths, steps, make_generator(seed, runner.question.id, method.name), method.num_seeds)
    drift = marginal_drift(traj)
    cid = cid_check(traj.answers, traj.num_labels, make_generator(seed, runner.question.id, method.name, "cid"))
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
