"""The EMD drift test: the U-statistic equals its pairwise definition and splits into the rollouts' betting terms,
each above its simplex bound; exact predictives give no p; the e-value by hand; and on simulated processes (small
instances of bench/drift_floor.py) near-certain questions and constant steps are flagged at most at the level,
a pulled process always."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from beliefdrift.diagnostics.drift_test import BET_FRACTIONS, DRIFT_LEVEL, betting_p, drift_test
from beliefdrift.diagnostics.kstep import kstep_exact, kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import StepProcess
from beliefdrift.engine.resampling import make_generator, sample_answers

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import drift_floor  # noqa: E402


def test_sq_drift_is_the_pairwise_u_statistic_and_the_sum_of_the_betting_terms() -> None:
    theta = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1], [0.9999, 0.00005, 0.00005]], dtype=torch.float64)
    process = StepProcess(theta, torch.full((3,), 0.3, dtype=torch.float64))
    kstep = kstep_monte_carlo(process, 4, 6, make_generator(0, "u"))
    chunked = kstep_monte_carlo(process, 4, 6, make_generator(0, "u"), budget=5)  # chunks split a prefix's rollouts
    # the rollouts themselves, drawn again from the same generator, one path per row and rollout
    _, thetas, _ = sample_answers(process.select(torch.arange(3).repeat_interleave(6)), 3, make_generator(0, "u"))
    x = thetas.double().reshape(3, 6, 4, 3)[:, :, 1:] - theta[:, None, None]  # [B, J, K − 1, |𝒜|]
    gram = torch.einsum("bika,bjka->bkij", x, x)
    off_diagonal = gram.sum((-1, -2)) - gram.diagonal(dim1=-2, dim2=-1).sum(-1)
    assert torch.allclose(kstep.sq_drift(), off_diagonal / 30, atol=1e-12)
    # Y_j = ⟨S_j, X_j⟩ with S_j = Σ_{i<j} X_i: Σ_j Y_j is half the off-diagonal sum, and L_j = min_a S_j(a) − ⟨S_j, p⟩
    earlier = x.cumsum(1) - x
    cross = (earlier * x).sum(-1)
    least = earlier.amin(-1) - (earlier * theta[:, None, None]).sum(-1)
    assert torch.allclose(kstep.cross[:, :, 1:], cross, atol=1e-12)
    assert torch.allclose(kstep.least[:, :, 1:], least, atol=1e-12)
    assert torch.allclose(2 * cross.sum(1), off_diagonal, atol=1e-12)
    # chunks draw other rollouts, but S_j must carry over from chunk to chunk: 2 Σ_j Y_j = J (J − 1) Û again
    assert torch.allclose(2 * chunked.cross[:, :, 1:].sum(1), 30 * chunked.sq_drift(), atol=1e-12)
    for ks in (kstep, chunked):
        assert (ks.cross >= ks.least - 1e-15).all()  # θ lies in the simplex
    bets = kstep.bets()
    expected = cross.sum(-1) / -least.sum(-1)
    assert bets.shape == (3, 5) and torch.allclose(bets, expected[:, 1:], atol=1e-12) and (bets >= -1).all()
    assert torch.allclose(kstep.bets(4), (cross[..., -1] / -least[..., -1])[:, 1:], atol=1e-12)


def test_exact_predictives_are_reported_without_p() -> None:
    process = StepProcess(torch.tensor([[0.5, 0.5]], dtype=torch.float64), torch.tensor([0.3], dtype=torch.float64))
    exact = kstep_exact(process, 4)
    zero = torch.zeros(1, 3, dtype=torch.float64)
    assert torch.allclose(exact.sq_drift(), zero, atol=1e-15)  # a martingale, enumerated
    test = drift_test([0.0, 0.0, 0.0], exact=True, bets=[[], [], []])
    assert test.p is None and test.drifts is False
    assert drift_test([0.1], exact=False).p is None  # records without betting increments: no test
    with pytest.raises(ValueError, match="Monte Carlo"):
        exact.bets()


def test_betting_p_by_hand() -> None:
    """E = mean over the bet fractions c of Π (1 + c Z_j), p = min(1, 1/E); the increments may come in any
    grouping (per question, as stored)."""
    z = np.array([0.5, -0.25, 0.8, 0.1])
    e = np.mean([np.prod(1 + c * z) for c in BET_FRACTIONS])
    assert betting_p(z) == pytest.approx(min(1.0, 1 / e))
    assert drift_test([0.1, 0.2], False, [[0.5, -0.25], [0.8, 0.1]]).p == pytest.approx(min(1.0, 1 / e))
    assert betting_p(np.zeros(0)) == 1.0 and betting_p(np.full(200, 0.5)) < 1e-6


def flagged(setting: drift_floor.Setting, options: int, rollouts: int, runs: int) -> tuple[float, float]:
    """The share of runs (of 20 questions) flagged at EMD‾ and the largest over b."""
    simulated = drift_floor.simulate(setting, options=options, rollouts=rollouts, questions=20, runs=runs, seed=1)
    emd, per_b = drift_floor.flag_rates(simulated)
    return emd, max(per_b)


def test_near_certain_questions_are_not_flagged() -> None:
    """An exact Pólya urn (α = 5, 4 options) at θ_max = 0.9999: the t-test over questions flagged it in 60–80% of
    runs (issue 38); the betting test holds its level."""
    urn = drift_floor.VERTICES[1]
    assert max(flagged(urn, options=4, rollouts=16, runs=40)) <= DRIFT_LEVEL + 2 * math.sqrt(
        DRIFT_LEVEL * (1 - DRIFT_LEVEL) / 40)


def test_flag_rate_holds_on_a_constant_step_martingale_and_a_pull_is_found() -> None:
    null = drift_floor.Setting("constant", 0.7, drift_floor.constant, drift_floor.dirichlet(0.3))
    assert max(flagged(null, options=5, rollouts=8, runs=40)) <= 0.1  # the t-test: 9.5–14% at b ≥ 5 (issue 38)
    pulled = drift_floor.Setting("pull", 0.3, drift_floor.constant, process=drift_floor.pulled(0.05))
    assert flagged(pulled, options=5, rollouts=8, runs=20)[0] == pytest.approx(1.0)
