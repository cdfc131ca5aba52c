"""The EMD drift test: the U-statistic equals its pairwise definition, exact predictives give no p, and on a
constant-step martingale (where the urn floor fired in most runs) it flags few runs while a pulled process is
flagged (a small instance of bench/drift_floor.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from beliefdrift.diagnostics.drift_test import drift_test
from beliefdrift.diagnostics.kstep import kstep_exact, kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import StepProcess
from beliefdrift.engine.resampling import make_generator, sample_answers

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import drift_floor  # noqa: E402


def test_sq_drift_is_the_pairwise_u_statistic() -> None:
    theta = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]], dtype=torch.float64)
    process = StepProcess(theta, torch.full((2,), 0.3, dtype=torch.float64))
    generator = make_generator(0, "u")
    kstep = kstep_monte_carlo(process, 4, 6, generator)
    again = kstep_monte_carlo(process, 4, 6, make_generator(0, "u"))
    # the rollouts themselves, drawn again from the same generator, one path per row and rollout
    _, thetas, _ = sample_answers(process.select(torch.arange(2).repeat_interleave(6)), 3, make_generator(0, "u"))
    x = thetas.double().reshape(2, 6, 4, 3)[:, :, 1:] - theta[:, None, None]  # [B, J, K − 1, |𝒜|]
    gram = torch.einsum("bika,bjka->bkij", x, x)
    off_diagonal = gram.sum((-1, -2)) - gram.diagonal(dim1=-2, dim2=-1).sum(-1)
    assert torch.allclose(again.probs, kstep.probs)
    assert torch.allclose(kstep.sq_drift(), off_diagonal / 30, atol=1e-12)


def test_exact_predictives_are_reported_without_p() -> None:
    process = StepProcess(torch.tensor([[0.5, 0.5]], dtype=torch.float64), torch.tensor([0.3], dtype=torch.float64))
    exact = kstep_exact(process, 4)
    zero = torch.zeros(1, 3, dtype=torch.float64)
    assert torch.allclose(exact.sq_drift(), zero, atol=1e-15)  # a martingale, enumerated
    test = drift_test([0.0, 0.0, 0.0], exact=True)
    assert test.p is None and test.drifts is False
    assert drift_test([0.1], exact=False).p is None  # one question: nothing to test over


def test_flag_rate_holds_on_a_constant_step_martingale_and_a_pull_is_found() -> None:
    null = drift_floor.Setting("constant", 0.3, drift_floor.constant)
    bar, curve, _ = drift_floor.simulate(null, options=5, rollouts=8, questions=20, runs=40, seed=1)
    emd, per_b = drift_floor.flag_rates(bar, curve)
    assert max(emd, *per_b) <= 0.1  # nominal 2.5%; the urn floor flagged up to 89% here (issue 27)
    pulled = drift_floor.Setting("pull", 0.3, drift_floor.constant, drift_floor.pulled(0.05))
    bar, curve, _ = drift_floor.simulate(pulled, options=5, rollouts=8, questions=20, runs=20, seed=1)
    assert drift_floor.flag_rates(bar, curve)[0] == pytest.approx(1.0)
