"""Top-K prefixes (beam search made exact) against brute force; picking; burn-in prefixes follow θ."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from process_stubs import HistoryProcess, fresh_theta, runner_for

from beliefdrift.diagnostics.prefixes import Prefix, TopPrefixes, burn_in_prefixes, pick_prefix, top_prefixes
from beliefdrift.engine.resampling import make_generator

pytest_plugins = ["process_stubs"]  # drifting_lm, short_template


def brute_force_top(runner, length: int, k: int) -> list[tuple[tuple[int, ...], float]]:
    """Every prefix of `length` answers scored with uncached forward passes, best first."""
    labels = runner.question.num_choices
    theta = {h: fresh_theta(runner, h).log() for n in range(length) for h in itertools.product(range(labels), repeat=n)}
    scored = [(h, sum(float(theta[h[:t]][h[t]]) for t in range(length)))
              for h in itertools.product(range(labels), repeat=length)]
    return sorted(scored, key=lambda s: -s[1])[:k]


@pytest.mark.parametrize("length", [0, 1, 2, 3])
def test_top_prefixes_are_the_true_top_k(drifting_lm, short_template, length):
    runner = runner_for(drifting_lm, short_template)
    got = top_prefixes(runner.paths(1), length, k=5)
    expected = brute_force_top(runner, length, k=5)
    assert got.exact
    assert [p.answers for p in got.prefixes] == [h for h, _ in expected]
    for prefix, (_, score) in zip(got.prefixes, expected, strict=True):
        assert prefix.log_prob == pytest.approx(score, abs=1e-4)


def _trap(history: tuple[int, ...]) -> list[float]:
    """A first answer B (θ .4) is followed by A with θ .99; after A everything is a coin flip."""
    if not history:
        return [0.6, 0.4]
    return [0.99, 0.01] if history[0] == 1 else [0.5, 0.5]


def test_search_recovers_what_the_beam_dropped():
    # Width-1 beam keeps A (.6), whose children score .3; the best length-2 prefix is (B, A) = .396.
    got = top_prefixes(HistoryProcess(_trap), length=2, k=1)
    assert got.exact and got.prefixes[0].answers == (1, 0)
    assert got.prefixes[0].log_prob == pytest.approx(math.log(0.4 * 0.99))
    # Without search budget the beam's answer is returned and flagged as unproven.
    beam_only = top_prefixes(HistoryProcess(_trap), length=2, k=1, max_expansions=0)
    assert not beam_only.exact and beam_only.prefixes[0].answers in {(0, 0), (0, 1)}
    # A wider beam finds it directly.
    assert top_prefixes(HistoryProcess(_trap), length=2, k=1, beam_width=2, max_expansions=0).exact


def test_top_prefixes_needs_one_root():
    with pytest.raises(ValueError, match="single root"):
        top_prefixes(HistoryProcess(_trap, [(), ()]), 2, 1)


def test_pick_prefix_is_uniform_and_reproducible():
    top = TopPrefixes([Prefix((a,), -float(a)) for a in range(5)], exact=True)
    draws = [pick_prefix(top, make_generator(0, "pick")).answers for _ in range(3)]
    assert len(set(draws)) == 1, "same generator seed, same pick"
    generator = make_generator(1)
    counts = torch.bincount(torch.tensor([pick_prefix(top, generator).answers[0] for _ in range(5000)]), minlength=5)
    assert counts.min() > 850 and counts.max() < 1150  # 1000 ± ~4.5 sd


def _no_repeat(history: tuple[int, ...]) -> list[float]:
    """Three labels; never repeats the previous answer (uniform over the other two)."""
    if not history:
        return [1 / 3] * 3
    return [0.0 if a == history[-1] else 0.5 for a in range(3)]


def test_burn_in_prefixes_are_sampled_from_the_process():
    root = HistoryProcess(_no_repeat, [(), ()])
    seen = []
    for b, batch, answers in burn_in_prefixes(root, 12, make_generator(0, "burn")):
        assert answers.shape == (2, b)
        assert batch.histories == [tuple(row) for row in answers.tolist()]
        seen.append(answers)
    final = seen[-1]
    assert (final[:, 1:] != final[:, :-1]).all(), "every answer is drawn from θ after the previous one"
    assert root.histories == [(), ()], "the root is not advanced"
    again = list(burn_in_prefixes(HistoryProcess(_no_repeat, [(), ()]), 12, make_generator(0, "burn")))[-1][2]
    assert torch.equal(again, final)
