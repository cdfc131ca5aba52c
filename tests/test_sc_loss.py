"""The SC loss and its PG correction on fixed distributions: values, stop-gradient, sign, horizons."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from beliefdrift.amortize.loss import (
    SelfConsistencyLoss,
    draw_horizons,
    expected_sc_loss,
    horizon_pairs,
    log_predictive,
)
from beliefdrift.engine.resampling import make_generator

# θ^{(j)}_d for J = 2 paths, d = 0, 1, 2, three labels; θ_0 is shared by both paths.
THETA0 = [0.5, 0.3, 0.2]
THETAS = [
    [THETA0, [0.6, 0.2, 0.2], [0.7, 0.2, 0.1]],
    [THETA0, [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]],
]
ROLLOUTS = torch.tensor([[0, 2], [1, 0]])  # A^{(1)} = (0, 2), A^{(2)} = (1, 0)


def log_thetas(requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(THETAS, dtype=torch.float64).log().requires_grad_(requires_grad)


def test_sc_and_pg_equal_hand_computed_values():
    # k1 = 2, k2 = 3: p̂^(2) = mean of θ_1 = (.4, .4, .2), p̂^(3) = mean of θ_2 = (.4, .25, .35).
    out = SelfConsistencyLoss(beta=0.5, clip=5.0)(log_thetas(), ROLLOUTS, k1=2, k2=3)
    sc = -(0.4 * math.log(0.4) + 0.25 * math.log(0.4) + 0.35 * math.log(0.2))
    # ℓ_j = H(p̂^(3), θ^{(j)}_1); adv_j = ℓ_j − mean ℓ; log p of A^{(j)}_1 under θ_0.
    ell = [-(0.4 * math.log(0.6) + 0.6 * math.log(0.2)), -(0.75 * math.log(0.2) + 0.25 * math.log(0.6))]
    adv = [ell[0] - sum(ell) / 2, ell[1] - sum(ell) / 2]
    pg = (adv[0] * math.log(0.5) + adv[1] * math.log(0.3)) / 2
    assert float(out.sc) == pytest.approx(sc, abs=1e-12)
    assert float(out.pg) == pytest.approx(pg, abs=1e-12)
    assert float(out.loss) == pytest.approx(sc + 0.5 * pg, abs=1e-12)


def test_first_horizon_needs_no_rollouts_and_has_no_pg():
    # k1 = 1: p̂^(1) = θ_0 exactly, every ℓ_j is equal, so the PG term vanishes.
    out = SelfConsistencyLoss()(log_thetas(), ROLLOUTS, k1=1, k2=2)
    assert float(out.sc) == pytest.approx(-(0.4 * math.log(0.5) + 0.4 * math.log(0.3) + 0.2 * math.log(0.2)))
    assert float(out.pg) == 0.0


def test_advantages_are_clipped():
    out = SelfConsistencyLoss(beta=1.0, clip=0.01)(log_thetas(), ROLLOUTS, k1=2, k2=3)
    assert float(out.pg) == pytest.approx((-0.01 * math.log(0.5) + 0.01 * math.log(0.3)) / 2, abs=1e-12)


def test_no_gradient_reaches_the_stop_gradient_target():
    thetas = log_thetas(requires_grad=True)
    SelfConsistencyLoss(beta=0.01)(thetas, ROLLOUTS, k1=2, k2=3).loss.backward()
    assert torch.count_nonzero(thetas.grad[:, 2]) == 0, "p̂^(k2) is a stop-gradient target"
    assert torch.count_nonzero(thetas.grad[:, 1]) > 0, "p̂^(k1) must receive gradient"
    assert torch.count_nonzero(thetas.grad[:, 0]) > 0, "the PG term differentiates the rollout log-probabilities"


def test_sc_gradient_moves_the_short_horizon_towards_the_long_one():
    logits = torch.tensor(THETAS, dtype=torch.float64).log().requires_grad_(True)
    optimizer = torch.optim.SGD([logits], lr=2.0)
    target = log_predictive(logits.detach().log_softmax(-1), 3).exp()
    before = (log_predictive(logits.detach().log_softmax(-1), 2).exp() - target).abs().sum()
    for _ in range(20):
        optimizer.zero_grad()
        SelfConsistencyLoss(beta=0.0)(logits.log_softmax(-1), ROLLOUTS, k1=2, k2=3).loss.backward()
        optimizer.step()
    after = (log_predictive(logits.detach().log_softmax(-1), 2).exp() - target).abs().sum()
    assert after < 0.1 * before


def test_pg_descent_raises_log_prob_of_rollouts_with_below_average_loss():
    # Path 1 (A_1 = 0) has ℓ below the mean, path 2 (A_1 = 1) above: a descent step on L_pg must raise
    # θ_0(0) relative to θ_0(1).
    logits0 = torch.tensor(THETA0, dtype=torch.float64).log().requires_grad_(True)
    rest = torch.tensor(THETAS, dtype=torch.float64)[:, 1:].log()

    def thetas() -> torch.Tensor:
        return torch.cat([logits0.log_softmax(-1).expand(2, 1, 3), rest], 1)

    out = SelfConsistencyLoss(beta=1.0)(thetas(), ROLLOUTS, k1=2, k2=3)
    out.pg.backward()
    with torch.no_grad():
        ratio_before = float(logits0[0] - logits0[1])
        logits0 -= 0.1 * logits0.grad
        ratio_after = float(logits0[0] - logits0[1])
    assert ratio_after > ratio_before


def test_anchor_is_the_kl_from_the_forecast_to_theta0_and_only_moves_theta0():
    target = torch.tensor([0.2, 0.0, 0.8], dtype=torch.float64)  # a zero entry: 0 · log 0 = 0
    thetas = log_thetas(requires_grad=True)
    plain = SelfConsistencyLoss(beta=0.5)(thetas, ROLLOUTS, k1=2, k2=3)
    out = SelfConsistencyLoss(beta=0.5, anchor=2.0)(thetas, ROLLOUTS, k1=2, k2=3, forecast=target)
    kl = 0.2 * math.log(0.2 / 0.5) + 0.8 * math.log(0.8 / 0.2)
    assert float(out.anchor.detach()) == pytest.approx(kl, abs=1e-12)
    assert float(out.loss) == pytest.approx(float(plain.loss) + 2.0 * kl, abs=1e-12)
    (out.loss - plain.loss).backward()
    assert torch.count_nonzero(thetas.grad[:, 1:]) == 0, "the anchor acts on θ_0 only"
    assert torch.count_nonzero(thetas.grad[0, 0]) > 0
    same = SelfConsistencyLoss(anchor=1.0)(log_thetas(), ROLLOUTS, 1, 2, forecast=torch.tensor(THETA0)).anchor
    assert float(same) == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="forecast"):
        SelfConsistencyLoss(anchor=1.0)(log_thetas(), ROLLOUTS, k1=1, k2=2)


def test_format_term_is_the_mean_negative_log_label_mass_up_to_k2():
    log_mass = torch.tensor([[0.5, 0.8, 0.9], [0.5, 0.4, 0.01]], dtype=torch.float64).log().requires_grad_(True)
    plain = SelfConsistencyLoss(beta=0.5)(log_thetas(), ROLLOUTS, k1=1, k2=2)
    out = SelfConsistencyLoss(beta=0.5, format_weight=0.3)(log_thetas(), ROLLOUTS, k1=1, k2=2, log_mass=log_mass)
    expected = -(math.log(0.5) + math.log(0.8) + math.log(0.5) + math.log(0.4)) / 4
    assert float(out.format.detach()) == pytest.approx(expected, abs=1e-12)
    assert float(out.loss.detach()) == pytest.approx(float(plain.loss) + 0.3 * expected, abs=1e-12)
    out.loss.backward()
    assert torch.count_nonzero(log_mass.grad[:, 2]) == 0, "positions after k2 are not in the loss"
    with pytest.raises(ValueError, match="label masses"):
        SelfConsistencyLoss(format_weight=1.0)(log_thetas(), ROLLOUTS, k1=1, k2=2)


def test_anchor_stops_the_collapse_that_the_sc_loss_alone_rewards():
    # A self-reinforcing model, θ(· | A_1 = a) = softmax(w + c·e_a): the two-step predictive is sharper than θ_0,
    # so L_SC alone (θ_0 chasing the stop-gradient p̂^(2)) drives θ_0 onto one label; the anchor holds it near
    # the forecast f, the initial p̂^(2).
    c, paths = 1.5, 256

    def thetas(w: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
        after = (w + c * torch.nn.functional.one_hot(answers, 3)).log_softmax(-1)
        return torch.stack([w.log_softmax(-1).expand(paths, 3), after], 1)

    def train(anchor: float) -> tuple[torch.Tensor, torch.Tensor]:
        generator = make_generator(0, "self-reinforcing")
        w = torch.tensor(THETA0, dtype=torch.float64).log().requires_grad_(True)
        answers = torch.multinomial(w.detach().softmax(-1), paths, replacement=True, generator=generator)
        forecast = thetas(w, answers)[:, 1].exp().mean(0).detach()
        optimizer = torch.optim.SGD([w], lr=1.0)
        for _ in range(300):  # on-policy: fresh answers from the current θ_0 every step
            answers = torch.multinomial(w.detach().softmax(-1), paths, replacement=True, generator=generator)
            optimizer.zero_grad()
            loss = SelfConsistencyLoss(beta=0.0, anchor=anchor)
            loss(thetas(w, answers), answers[:, None], 1, 2, forecast=forecast).loss.backward()
            optimizer.step()
        return w.detach().softmax(-1), forecast

    collapsed, _ = train(0.0)
    assert float(collapsed.max()) > 0.99
    anchored, forecast = train(2.0)
    assert float((anchored - forecast).abs().sum()) < 0.1


def test_horizons_follow_the_papers_distribution():
    pairs = horizon_pairs(6)
    assert sum(p for _, _, p in pairs) == pytest.approx(1.0)
    assert {(k1, k2) for k1, k2, _ in pairs} == {(a, b) for a in range(1, 6) for b in range(a + 1, 7)}
    generator = make_generator(0, "horizons")
    draws = Counter(draw_horizons(generator, 6) for _ in range(20000))
    assert set(draws) == {(k1, k2) for k1, k2, _ in pairs}
    for k1, k2, p in pairs:
        assert draws[(k1, k2)] / 20000 == pytest.approx(p, abs=0.01)
    assert draws[(5, 6)] / 20000 == pytest.approx(0.2, abs=0.01)  # k1 = 5 leaves δ = 1 only


def test_expected_sc_loss_averages_over_horizon_pairs():
    thetas = torch.rand(3, 6, 4, dtype=torch.float64).log_softmax(-1)
    empty = torch.zeros(3, 5, dtype=torch.long)
    loss = SelfConsistencyLoss(beta=0.0)
    manual = sum(p * float(loss(thetas, empty, k1, k2).sc) for k1, k2, p in horizon_pairs(6))
    assert float(expected_sc_loss(thetas, 6)) == pytest.approx(manual)


def test_invalid_horizons_are_rejected():
    with pytest.raises(ValueError, match="k1 < k2"):
        SelfConsistencyLoss()(log_thetas(), ROLLOUTS, k1=2, k2=2)
    with pytest.raises(ValueError, match="k1 < k2"):
        SelfConsistencyLoss()(log_thetas(), ROLLOUTS, k1=2, k2=4)


def test_micro_batch_predictive_scope_averages_the_loss_of_each_micro_batch():
    # Paths 1–2 are THETAS, paths 3–4 are identical (θ_1 = (.1, .1, .8), θ_2 = (.05, .05, .9)); θ_0 is shared.
    # k1 = 2, k2 = 3. Scope "update": p̂^(3) = (.225, .15, .625), p̂^(2) = (.25, .25, .5) over all four paths.
    # Scope "micro_batch" (2 paths): the first pair's L_SC, L_pg (as in the first test) and the second pair's
    # L_SC = H(θ_2, θ_1), L_pg = 0 (equal ℓ_j, zero advantages), averaged.
    second = [THETA0, [0.1, 0.1, 0.8], [0.05, 0.05, 0.9]]
    thetas = torch.tensor([*THETAS, second, second], dtype=torch.float64).log()
    rollouts = torch.tensor([[0, 2], [1, 0], [2, 1], [2, 1]])
    update = SelfConsistencyLoss(beta=0.5)(thetas, rollouts, k1=2, k2=3)
    sc_update = -(0.225 * math.log(0.25) + 0.15 * math.log(0.25) + 0.625 * math.log(0.5))
    assert float(update.sc) == pytest.approx(sc_update, abs=1e-12)
    assert float(SelfConsistencyLoss(beta=0.5, predictive_paths=4)(thetas, rollouts, 2, 3).loss) == float(update.loss)

    scoped = SelfConsistencyLoss(beta=0.5, predictive_paths=2)(thetas, rollouts, k1=2, k2=3)
    first = SelfConsistencyLoss(beta=0.5)(log_thetas(), ROLLOUTS, k1=2, k2=3)
    sc_second = -(0.05 * math.log(0.1) + 0.05 * math.log(0.1) + 0.9 * math.log(0.8))
    assert float(scoped.sc) == pytest.approx((float(first.sc) + sc_second) / 2, abs=1e-12)
    assert float(scoped.pg) == pytest.approx(float(first.pg) / 2, abs=1e-12)
    assert float(scoped.loss) == pytest.approx(float(scoped.sc) + 0.5 * float(scoped.pg), abs=1e-12)
    assert abs(float(scoped.sc) - sc_update) > 0.1, "the two readings differ here"
    # A split into equal blocks leaves the anchor and the format term unchanged.
    log_mass = torch.full((4, 3), 0.8, dtype=torch.float64).log()
    kwargs = {"forecast": torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64), "log_mass": log_mass}
    full = SelfConsistencyLoss(anchor=1.0, format_weight=1.0)(thetas, rollouts, 2, 3, **kwargs)
    split = SelfConsistencyLoss(anchor=1.0, format_weight=1.0, predictive_paths=2)(thetas, rollouts, 2, 3, **kwargs)
    assert (float(split.anchor), float(split.format)) == (float(full.anchor), float(full.format))
