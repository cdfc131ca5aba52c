"""k-step predictives: exact enumeration against hand computation and fresh forward passes; Monte Carlo
converges to exact; the shared-cache implementation on a real (tiny) model."""

from __future__ import annotations

import math

import pytest
import torch
from process_stubs import HistoryProcess, count_drift, fresh_theta, polya, runner_for

from beliefdrift.diagnostics.kstep import (
    enumerate_continuations,
    exact_is_affordable,
    kstep_exact,
    kstep_monte_carlo,
    kstep_predictives,
)
from beliefdrift.engine.resampling import make_generator

pytest_plugins = ["process_stubs"]  # drifting_lm, short_template


def test_exact_matches_hand_computation():
    # θ(A) = 0.3 + 0.2·#A. p^(2)(A) = .3·.5 + .7·.3 = .36;
    # p^(3)(A) = .3·.5·.7 + .3·.5·.5 + .7·.3·.5 + .7·.7·.3 = .432.
    got = kstep_exact(HistoryProcess(count_drift), horizon=3).probs[0, :, 0]
    torch.testing.assert_close(got, torch.tensor([0.3, 0.36, 0.432], dtype=torch.float64))
    # After the prefix (A, B): θ(A) = .5, p^(2)(A) = .5·.7 + .5·.5 = .6.
    got = kstep_exact(HistoryProcess(count_drift, [(0, 1)]), horizon=2).probs[0, :, 0]
    torch.testing.assert_close(got, torch.tensor([0.5, 0.6], dtype=torch.float64))


def test_exact_keeps_prefixes_apart_and_chunking_changes_nothing():
    process = HistoryProcess(polya, [(), (0, 0, 2), (1,)])
    whole = kstep_exact(process, horizon=4)
    chunked = kstep_exact(process, horizon=4, budget=4)  # 1 parent per forward pass
    torch.testing.assert_close(whole.probs, chunked.probs, rtol=0, atol=1e-12)
    # A Pólya urn is a martingale: p^(k) = θ_n for every k, at every prefix, though θ depends on the history.
    torch.testing.assert_close(whole.probs, process.dist.probs[:, None].expand(-1, 4, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(whole.p(1)[1], torch.tensor([3 / 6, 1 / 6, 2 / 6], dtype=torch.float64))


def test_monte_carlo_on_stub_is_unbiased_and_p1_exact():
    process = HistoryProcess(count_drift)
    mc = kstep_monte_carlo(process, horizon=3, num_rollouts=20000, generator=make_generator(0))
    torch.testing.assert_close(mc.p(1), process.dist.probs)  # no rollouts needed for k = 1
    exact = kstep_exact(process, horizon=3).probs
    assert (mc.probs - exact).abs().max() < 4 * 0.5 / math.sqrt(20000)


def test_p1_is_theta_and_exact_sums_to_one(drifting_lm, short_template):
    runner = runner_for(drifting_lm, short_template)
    batch = runner.paths(2)
    batch.advance(torch.tensor([[1, 3], [0, 0]]))
    theta = batch.dist.probs.clone()
    exact = kstep_exact(batch, horizon=3)
    torch.testing.assert_close(exact.p(1), theta.double())
    torch.testing.assert_close(exact.probs.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert torch.equal(batch.dist.probs, theta), "the prefix batch must not be advanced"
    torch.testing.assert_close(exact.p(1)[0], fresh_theta(runner, [1, 3]), atol=1e-5, rtol=0)


def test_enumeration_weights_are_products_of_theta(drifting_lm, short_template):
    runner = runner_for(drifting_lm, short_template)
    prefix = [2]
    batch = runner.paths(1)
    batch.advance(torch.tensor([prefix]))
    leaves = [level for level in enumerate_continuations(batch, depth=2, budget=8) if level.depth == 2]
    answers = torch.cat([level.answers for level in leaves])
    weights = torch.cat([level.weight for level in leaves])
    probs = torch.cat([level.probs for level in leaves])
    assert answers.shape == (16, 2) and len({tuple(a) for a in answers.tolist()}) == 16
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0, dtype=torch.float64))
    for leaf in (0, 7, 13):
        a1, a2 = answers[leaf].tolist()
        expected = fresh_theta(runner, prefix)[a1] * fresh_theta(runner, [*prefix, a1])[a2]
        torch.testing.assert_close(weights[leaf], expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(probs[leaf], fresh_theta(runner, [*prefix, a1, a2]), atol=1e-5, rtol=0)


def test_monte_carlo_converges_to_exact(drifting_lm, short_template):
    runner = runner_for(drifting_lm, short_template)
    batch = runner.paths(1)
    batch.advance(torch.tensor([[1, 3]]))
    exact = kstep_exact(batch, horizon=3).probs
    assert (exact[0, 1:] - exact[0, :1]).abs().sum(-1).min() > 0.2, "the model should drift (else the test is void)"

    def error(num_rollouts: int) -> float:
        mc = kstep_monte_carlo(batch, horizon=3, num_rollouts=num_rollouts, generator=make_generator(3, num_rollouts))
        return float((mc.probs - exact).abs().sum(-1).max())

    small, large = error(250), error(4000)
    assert large < 2 / math.sqrt(4000)
    assert large < small


@pytest.mark.parametrize("exact_budget, expect_exact", [(16, True), (15, False)])
def test_exact_is_used_when_affordable(exact_budget, expect_exact):
    assert exact_is_affordable(4, 3, exact_budget) is expect_exact  # 4^2 = 16 deepest nodes
    process = HistoryProcess(lambda h: polya(h, labels=4))
    got = kstep_predictives(process, 3, num_rollouts=8, generator=make_generator(0), exact_budget=exact_budget)
    assert got.exact is expect_exact and got.horizon == 3
