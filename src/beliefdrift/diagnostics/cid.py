"""A c.i.d. check: do a path's late answers follow the predictive it started from?

If A_1, A_2, … is conditionally identically distributed (c.i.d.), P(A_{n+k} ∈ · | A_{1:n}) = θ_n for every k ≥ 1
(Berti, Pratelli & Rigo 2004). At n = 0: the last answer A_N of a path is distributed as the path's first predictive
θ_0, the exact one-step predictive (after the prompt and any seeds) its first answer was drawn from. Paths are
independent given the question, so under c.i.d. the last answers of the J paths are independent draws from their own
θ_0^{(j)}, a known law whatever the process: exchangeable or not, whatever its steps. The check tests that law with

    T = ‖(1/J) Σ_j (e_{A_N^{(j)}} − θ_0^{(j)})‖₁,

p = (1 + #{T* ≥ T}) / (R + 1) over R draws T* of the statistic with A*^{(j)} ~ θ_0^{(j)}: valid at every J (size ≤
its level up to the float rounding of θ). A drift shows only as far as it moves the law of A_N away from θ_0, which a
few paths see only when it moves far: sharpening θ ← θ^1.3 after each step was rejected for 1.9–3.5% of questions at
J ≤ 8 (issue 46). The check is no drift test (`drift_test` is).
An earlier version flipped the signs of the paths' first-half minus second-half answer frequencies, a test exact
only for exchangeable answers: c.i.d. processes whose later answers freeze were rejected in up to 16% of questions.

T can be no larger than T_max = 2 (1 − min_a mean_j θ_0^{(j)}(a)) (every last answer on the option least expected),
so the p of T_max is the smallest p the paths drawn allow (`CIDCheck.smallest_p`); where it exceeds the level the
question cannot be rejected (e.g. 2 options near 50/50 and J ≤ 5), and the commands count such questions.

Beside the test, the first-half minus second-half answer frequencies D̄ = (1/J) Σ_j D^{(j)} (in the style of Falck
et al. 2024; h = ⌊N/2⌋, the middle answer of an odd N dropped) and each option's percentile bootstrap band over
paths show where early and late answers differ; they are descriptive, not the test.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from beliefdrift.engine.resampling import inverse_cdf

#: What the stored check is, pinned in the run identity of the commands that store it: a store written by another
#: test (an earlier beliefdrift's sign-flip test or per-option bands) is not resumed with this one.
CID_TEST = "Monte Carlo test of the last answers against the first predictives, L1"
#: The level at which the commands reject (`cid_check` runs at its default level, 1 − CID_ALPHA).
CID_ALPHA = 0.05
#: Statistics within this of each other count as equal (ties in exact arithmetic that rounding splits).
TIE = 1e-12


@dataclass(frozen=True)
class CIDCheck:
    """difference[a] = D̄(a); [low, high] its bootstrap band at `level`; l1 = ‖D̄‖₁; p the test's p-value and
    `smallest_p` the least p these paths allow (`last_answer_test`)."""

    difference: torch.Tensor  # [|𝒜|] float64
    low: torch.Tensor  # [|𝒜|]
    high: torch.Tensor  # [|𝒜|]
    level: float
    p: float
    smallest_p: float

    @property
    def l1(self) -> float:
        return float(self.difference.abs().sum())

    @property
    def consistent(self) -> bool:
        """No evidence against c.i.d. at this level: p > 1 − level."""
        return self.p > 1 - self.level


def half_differences(answers: torch.Tensor, num_labels: int) -> torch.Tensor:
    """D^{(j)}: first-half minus second-half answer frequencies of each path, answers [J, N] → [J, |𝒜|]."""
    half = answers.shape[1] // 2
    if half == 0:
        raise ValueError("the c.i.d. check needs at least 2 answers per path")
    onehot = torch.nn.functional.one_hot(answers, num_labels).double()
    return onehot[:, :half].mean(1) - onehot[:, -half:].mean(1)


def cid_check(
    answers: torch.Tensor, num_labels: int, generator: torch.Generator, *, start: torch.Tensor, resamples: int = 1000,
    level: float = 0.95,
) -> CIDCheck:
    """D̄ over the J paths of `answers` [J, N] (generated answers only, no seeds) and its bootstrap band (resample
    paths with replacement `resamples` times with `generator`, the (1 ∓ level)/2 quantiles of D̄); the test of the
    last answers against `start` [J, |𝒜|], each path's θ_0 (`last_answer_test`, drawn after the bootstrap, so the
    bands do not depend on the test)."""
    differences = half_differences(answers, num_labels)
    paths = differences.shape[0]
    index = torch.randint(paths, (resamples, paths), generator=generator)  # the bootstrap's resampled paths
    means = differences[index].mean(1)  # [resamples, |𝒜|]
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    p, smallest = last_answer_test(answers[:, -1], start, generator, resamples)
    return CIDCheck(differences.mean(0), low, high, level, p, smallest)


def last_answer_test(last: torch.Tensor, start: torch.Tensor, generator: torch.Generator,
                     resamples: int = 1000) -> tuple[float, float]:
    """p-value of T = ‖mean_j (e_{last_j} − θ_j)‖₁ for the last answers `last` [J] against their laws under c.i.d.,
    `start` [J, |𝒜|] (each path's θ_0, renormalised), and the smallest p these θ_0 allow, the p of T_max = 2 (1 −
    min_a mean_j θ_j(a)): both (1 + #{T* ≥ T}) / (R + 1) over R = `resamples` draws of T with A*_j ~ θ_j."""
    probs = start.double().cpu()
    probs = probs / probs.sum(-1, keepdim=True)
    paths, labels = probs.shape
    uniforms = torch.rand(resamples * paths, 1, generator=generator, dtype=torch.float64)
    drawn = inverse_cdf(probs.repeat(resamples, 1), uniforms).view(resamples, paths)

    def statistic(answers: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.one_hot(answers, labels).double() - probs).mean(-2).abs().sum(-1)

    null = statistic(drawn)  # [resamples]
    observed = float(statistic(last.cpu()))
    largest = 2 * (1 - float(probs.mean(0).min()))

    def p_value(value: float) -> float:
        return (1 + int((null >= value - TIE).sum())) / (resamples + 1)

    return p_value(observed), p_value(largest)
