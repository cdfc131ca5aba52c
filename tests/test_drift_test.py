"""The EMD drift test: the U-statistic equals its pairwise definition and splits into the rollouts' betting terms,
each within its simplex bounds; exact predictives give no p; the e-process by hand; and on simulated processes (small
instances of bench/drift_floor.py) near-certain questions and constant steps are flagged at most at the level, while
a pull towards a fixed option, self-reinforcing steps on the mode and sharpening are found."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from beliefdrift.diagnostics.drift_test import (
    BET_FRACTIONS,
    DRIFT_LEVEL,
    PRIOR_WEIGHT,
    STAKE_CAP,
    STAKE_WEIGHT,
    betting_p,
    drift_test,
)
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
    # Y_j = ⟨S_j, X_j⟩ with S_j = Σ_{i<j} X_i: Σ_j Y_j is half the off-diagonal sum; its bounds L_j, U_j are
    # min_a S_j(a) − ⟨S_j, p⟩ and max_a S_j(a) − ⟨S_j, p⟩
    earlier = x.cumsum(1) - x
    cross = (earlier * x).sum(-1)
    anchor = (earlier * theta[:, None, None]).sum(-1)
    least, most = earlier.amin(-1) - anchor, earlier.amax(-1) - anchor
    assert torch.allclose(kstep.cross[:, :, 1:], cross, atol=1e-12)
    assert torch.allclose(kstep.least[:, :, 1:], least, atol=1e-12)
    assert torch.allclose(kstep.most[:, :, 1:], most, atol=1e-12)
    assert torch.allclose(2 * cross.sum(1), off_diagonal, atol=1e-12)
    # chunks draw other rollouts, but S_j must carry over from chunk to chunk: 2 Σ_j Y_j = J (J − 1) Û again
    assert torch.allclose(2 * chunked.cross[:, :, 1:].sum(1), 30 * chunked.sq_drift(), atol=1e-12)
    for ks in (kstep, chunked):
        assert (ks.cross >= ks.least - 1e-15).all() and (ks.cross <= ks.most + 1e-15).all()  # θ lies in the simplex
    # the stored terms: (Y_j, L_j, U_j) summed over k, over s_j = √(j − 1) ρ, ρ = Σ_a p(a) (1 − p(a)), j = 2 … J
    scale = torch.arange(1, 6, dtype=torch.float64).sqrt() * (theta * (1 - theta)).sum(-1)[:, None]
    expected = torch.stack([cross.sum(-1), least.sum(-1), most.sum(-1)], -1)[:, 1:] / scale[..., None]
    assert kstep.bets().shape == (3, 5, 3) and torch.allclose(kstep.bets(), expected, atol=1e-12)
    at_k = torch.stack([cross[..., -1], least[..., -1], most[..., -1]], -1)[:, 1:] / scale[..., None]
    assert torch.allclose(kstep.bets(4), at_k, atol=1e-12)


def test_exact_predictives_are_reported_without_p() -> None:
    process = StepProcess(torch.tensor([[0.5, 0.5]], dtype=torch.float64), torch.tensor([0.3], dtype=torch.float64))
    exact = kstep_exact(process, 4)
    zero = torch.zeros(1, 3, dtype=torch.float64)
    assert torch.allclose(exact.sq_drift(), zero, atol=1e-15)  # a martingale, enumerated
    test = drift_test([0.0, 0.0, 0.0], exact=True, bets=[[], [], []])
    assert test.p is None and test.drifts is False
    assert drift_test([0.1], exact=False).p is None  # records without betting terms: no test
    with pytest.raises(ValueError, match="Monte Carlo"):
        exact.bets()


def e_process_by_hand(terms: np.ndarray) -> float:
    """p = min(1, 1 / max_t E_t), one rollout at a time: the largest stake c / |l| for every c, and the plug-in stake
    min(√(2 log(1/α) / (σ̂² n)), cap / max(|l|, u)) with σ̂² the mean of the earlier v² and the prior."""
    count = len(terms)
    largest, plug_in, squares, best = np.ones(len(BET_FRACTIONS)), 1.0, PRIOR_WEIGHT, 1.0
    for i, (v, low, high) in enumerate(terms):
        if low < 0:
            largest *= 1 + BET_FRACTIONS * max(v / -low, -1.0)
        variance = squares / (i + PRIOR_WEIGHT)
        bound = max(-low, high)
        stake = math.sqrt(2 * math.log(1 / DRIFT_LEVEL) / (variance * count))
        plug_in *= 1 + (min(stake, STAKE_CAP / bound) if bound > 0 else stake) * v
        squares += v * v
        best = max(best, STAKE_WEIGHT * largest.mean() + (1 - STAKE_WEIGHT) * plug_in)
    return min(1.0, 1 / best)


def test_betting_p_by_hand() -> None:
    """The e-process rollout by rollout; the terms may come in any grouping (per question, as stored), and one call
    takes a batch of runs."""
    rng = np.random.default_rng(3)
    low = -rng.uniform(0.5, 2, 40)
    high = rng.uniform(0.5, 2, 40)
    terms = np.stack([rng.uniform(low, high) + 0.2, low, high], 1)
    terms[5] = [0.3, 0.0, 0.4]  # no largest stake where L_j = 0
    expected = e_process_by_hand(terms)
    assert betting_p(terms) == pytest.approx(expected, rel=1e-10) and expected < 0.5
    assert drift_test([0.1, 0.2], False, [terms[:15].tolist(), terms[15:].tolist()]).p == pytest.approx(expected)
    batch = betting_p(np.stack([terms, terms[::-1], np.zeros_like(terms)]))
    assert batch.shape == (3,) and batch[0] == pytest.approx(expected) and batch[2] == pytest.approx(1.0)
    assert betting_p(np.zeros((0, 3))) == 1.0


def flagged(setting: drift_floor.Setting, options: int, rollouts: int, runs: int, points: tuple[int, ...] = (0, 5),
            questions: int = 20) -> tuple[float, float]:
    """The share of runs (of `questions`) flagged at EMD‾ and the largest over the b of `points`."""
    measured = drift_floor.simulate(setting, options, rollouts, questions, runs, 1, points)
    return float(np.mean(measured.p_bar < DRIFT_LEVEL)), float(np.mean(measured.p_b < DRIFT_LEVEL, 0).max())


def test_near_certain_questions_are_not_flagged() -> None:
    """An exact Pólya urn (α = 5, 4 options) at θ_max = 0.9999: the t-test over questions flagged it in 60–80% of
    runs (issue 38); the betting test holds its level."""
    urn = drift_floor.VERTICES[1]
    assert max(flagged(urn, options=4, rollouts=16, runs=40)) <= DRIFT_LEVEL + 2 * math.sqrt(
        DRIFT_LEVEL * (1 - DRIFT_LEVEL) / 40)


def test_flag_rate_holds_on_a_constant_step_martingale_and_a_pull_is_found() -> None:
    null = drift_floor.Setting("constant", 0.7, drift_floor.constant, drift_floor.dirichlet(0.3))
    assert max(flagged(null, options=5, rollouts=8, runs=40)) <= 0.1  # the t-test: 9.5–14% at b ≥ 5 (issue 38)
    pulled = drift_floor.Setting("pull", 0.3, drift_floor.constant, process=drift_floor.simulated(pull=0.05))
    assert flagged(pulled, options=5, rollouts=8, runs=20)[0] == pytest.approx(1.0)


@pytest.mark.parametrize("drift", [{"reinforce": 0.3}, {"sharpen": 1.3}])
def test_drift_towards_the_models_own_answer_is_found(drift: dict[str, float]) -> None:
    """Each answer that agrees with the current mode moves θ further (w = 0.6 on the mode, 0.3 otherwise), or θ
    sharpens (θ^1.3, normalised): E[Û] > 0, but the former increments Y_j / |L_j| have a negative mean, and the former
    test found them in 5% and 25% of these runs (issue 46)."""
    setting = drift_floor.Setting("mode", 0.3, drift_floor.constant, process=drift_floor.simulated(**drift))
    assert flagged(setting, options=3, rollouts=16, runs=20, points=(0,), questions=30)[0] >= 0.8
