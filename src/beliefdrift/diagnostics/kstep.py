"""k-step predictives p^(k)_n(a) = P(A_{n+k} = a | a_{1:n}) = E[θ_{n+k-1}(a) | a_{1:n}], for k = 1 … K.

p^(1)_n = θ_n needs no rollouts. Two estimators of the rest:

- Monte Carlo: J continuations of depth K−1 sampled from the process give every k ≤ K at once,
  p̂^(k) = (1/J) Σ_j θ(· | a_{1:n}, A^{(j)}_{n+1:n+k-1}).
- Exact enumeration: p^(k) = Σ_{c ∈ 𝒜^{k-1}} Π_i θ(c_i | a_{1:n}, c_{<i}) · θ(· | a_{1:n}, c), expanded level by level
  on the shared cache (every node forks into |𝒜| children, one forward pass per level, chunked to a row budget).

Both are written against `AnswerProcess`, the part of the `backend.AnswerPaths` interface they need, so a stub
process with a known θ can stand in for a model in tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from beliefdrift.backend.model import SteppedPaths
from beliefdrift.config.diagnostics import BATCH_BUDGET, EXACT_BUDGET
from beliefdrift.diagnostics.drift_test import bet_terms, rollout_terms
from beliefdrift.engine.resampling import sample_answers


class AnswerProcess(SteppedPaths, Protocol):
    """A batch of answer histories that can be forked and extended (implemented by `backend.AnswerPaths`, and by a
    process with a known θ built on `backend.model.EagerPaths`)."""

    def select(self, index: torch.Tensor | list[int]) -> AnswerProcess: ...


@dataclass(frozen=True)
class KStep:
    """probs[b, k−1] = p^(k) for prefix b of the batch, k = 1 … K; `exact` says how they were computed."""

    probs: torch.Tensor  # [B, K, |𝒜|] float64
    exact: bool
    sq: torch.Tensor | None = None  # Monte Carlo only: [B, K] mean over rollouts of ‖θ^{(j)}‖² at each k
    rollouts: int = 0  # J (Monte Carlo only)
    cross: torch.Tensor | None = None  # Monte Carlo only: [B, J, K] Y_j = ⟨S_j, X_j⟩ of the drift test at each k
    least: torch.Tensor | None = None  # Monte Carlo only: [B, J, K] its bound L_j = min_a S_j(a) − ⟨S_j, p^(1)⟩
    most: torch.Tensor | None = None  # Monte Carlo only: [B, J, K] its bound U_j = max_a S_j(a) − ⟨S_j, p^(1)⟩
    spread: torch.Tensor | None = None  # Monte Carlo only: [B] ρ = Σ_a p^(1)(a) (1 − p^(1)(a)), the terms' scale

    @property
    def horizon(self) -> int:
        return self.probs.shape[1]

    def p(self, k: int) -> torch.Tensor:
        """p^(k) for every prefix [B, |𝒜|]."""
        return self.probs[:, k - 1]

    def sq_drift(self) -> torch.Tensor:
        """Unbiased ‖p^(k) − p^(1)‖₂², k = 2 … K: [B, K − 1]. With X_j = θ^{(j)} − p^(1) over J independent
        rollouts it is the U-statistic (‖Σ_j X_j‖² − Σ_j ‖X_j‖²) / (J(J − 1)) = (J D − S) / (J − 1), D = ‖p̂^(k) −
        p^(1)‖², S = mean_j ‖X_j‖²: its mean is exactly 0 for every martingale. Exact enumeration: D itself."""
        first = self.probs[:, :1]
        plug_in = (self.probs[:, 1:] - first).square().sum(-1)
        if self.exact:
            return plug_in
        if self.sq is None or self.rollouts < 2:
            raise ValueError("the unbiased drift needs J ≥ 2 Monte Carlo rollouts and their ‖θ‖²")
        spread = self.sq[:, 1:] - 2 * (self.probs[:, 1:] * first).sum(-1) + first.square().sum(-1)
        return (self.rollouts * plug_in - spread) / (self.rollouts - 1)

    def bets(self, k: int | None = None) -> torch.Tensor:
        """The drift test's terms (Y_j, L_j, U_j) / s_j (`drift_test.bet_terms`) of rollouts j = 2 … J: [B, J − 1, 3],
        for ‖p^(k) − p^(1)‖₂² at one k, or for Σ_{k=2…K} (EMD‾) when `k` is None. Monte Carlo only."""
        if self.cross is None or self.least is None or self.most is None or self.spread is None:
            raise ValueError("the drift test's increments need Monte Carlo rollouts")
        columns = slice(1, None) if k is None else slice(k - 1, k)
        cross, least, most = (part[..., columns].sum(-1) for part in (self.cross, self.least, self.most))
        terms = bet_terms(cross, least, most, self.spread)
        return terms[:, 1:]


@dataclass(frozen=True)
class Level:
    """Nodes at depth `depth` of the continuation tree below each prefix (one chunk of them).

    owner[i] is node i's prefix in the batch, answers[i] its continuation c (length `depth`), weight[i] =
    Π θ(c_t | a_{1:n}, c_{<t}) its probability and probs[i] = θ(· | a_{1:n}, c).
    """

    depth: int
    owner: torch.Tensor  # [nodes] long
    answers: torch.Tensor  # [nodes, depth] long
    weight: torch.Tensor  # [nodes] float64
    probs: torch.Tensor  # [nodes, |𝒜|] float64


def enumerate_continuations(batch: AnswerProcess, depth: int, budget: int = BATCH_BUDGET) -> Iterator[Level]:
    """Every continuation of up to `depth` answers after each path of `batch`, level by level.

    A level is one forward pass over all its nodes while they fit in `budget` rows; beyond that the tree is
    expanded a chunk of parents at a time (depth first over chunks), so memory stays bounded.
    """
    size = batch.size
    yield from _expand(
        batch,
        Level(
            0,
            torch.arange(size),
            torch.empty(size, 0, dtype=torch.long),
            torch.ones(size, dtype=torch.float64),
            batch.dist.probs.double().cpu(),
        ),
        depth,
        budget,
    )


def _expand(batch: AnswerProcess, level: Level, depth: int, budget: int) -> Iterator[Level]:
    yield level
    if level.depth == depth:
        return
    labels = level.probs.shape[1]
    step = max(1, budget // labels)
    for start in range(0, batch.size, step):
        parents = torch.arange(start, min(start + step, batch.size))
        index = parents.repeat_interleave(labels)
        answers = torch.arange(labels).repeat(len(parents))
        children = batch.select(index)
        children.advance(answers[:, None])
        child = Level(
            level.depth + 1,
            level.owner[index],
            torch.cat([level.answers[index], answers[:, None]], 1),
            (level.weight[parents, None] * level.probs[parents]).reshape(-1),
            children.dist.probs.double().cpu(),
        )
        yield from _expand(children, child, depth, budget)


def kstep_exact(batch: AnswerProcess, horizon: int, budget: int = BATCH_BUDGET) -> KStep:
    """Exact p^(k), k = 1 … `horizon`, for every path of `batch`: Σ over the |𝒜|^{k−1} continuations of
    weight · θ. Costs Σ_{l<horizon} B·|𝒜|^l rows; the batch itself is not advanced."""
    probs = torch.zeros(batch.size, horizon, batch.dist.probs.shape[1], dtype=torch.float64)
    for level in enumerate_continuations(batch, horizon - 1, budget):
        probs[:, level.depth].index_add_(0, level.owner, level.weight[:, None] * level.probs)
    return KStep(probs, exact=True)


def kstep_monte_carlo(
    batch: AnswerProcess, horizon: int, num_rollouts: int, generator: torch.Generator, budget: int = BATCH_BUDGET
) -> KStep:
    """Monte Carlo p̂^(k), k = 1 … `horizon`: J = `num_rollouts` continuations of depth horizon − 1 per path,
    p̂^(k) the mean θ after k − 1 of them (p̂^(1) = θ exactly), with the mean ‖θ‖² (for `KStep.sq_drift`) and each
    rollout's terms of the drift test (`KStep.bets`). Chunked to `budget` rows per forward pass."""
    rows = torch.arange(batch.size).repeat_interleave(num_rollouts)
    total = torch.zeros(batch.size, horizon, batch.dist.probs.shape[1], dtype=torch.float64)
    total_sq = torch.zeros(batch.size, horizon, dtype=torch.float64)
    simplex_total = torch.zeros_like(total)  # Σ over the rollouts so far of θ renormalised to sum 1
    cross, least, most = (torch.zeros(len(rows), horizon, dtype=torch.float64) for _ in range(3))
    for start in range(0, len(rows), budget):
        owner = rows[start : start + budget]
        _, thetas, _ = sample_answers(batch.select(owner), horizon - 1, generator)
        thetas = thetas.double().cpu()
        total.index_add_(0, owner, thetas)
        total_sq.index_add_(0, owner, thetas.square().sum(-1))
        chunk = slice(start, start + len(owner))
        cross[chunk], least[chunk], most[chunk] = _bet_terms(thetas / thetas.sum(-1, keepdim=True), owner, start,
                                                             num_rollouts, simplex_total)
    shape = (batch.size, num_rollouts, horizon)
    start_probs = batch.dist.probs.double().cpu()
    start_probs = start_probs / start_probs.sum(-1, keepdim=True)
    return KStep(total / num_rollouts, exact=False, sq=total_sq / num_rollouts, rollouts=num_rollouts,
                 cross=cross.view(shape), least=least.view(shape), most=most.view(shape),
                 spread=(start_probs * (1 - start_probs)).sum(-1))


def _bet_terms(thetas: torch.Tensor, owner: torch.Tensor, start: int, rollouts: int,
               total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Y_j = ⟨S_j, X_j⟩ and its bounds L_j, U_j [n, K] (`drift_test.rollout_terms`) of the n rollouts `thetas`
    [n, K, |𝒜|] (rows start … start + n − 1 of the rollout order, prefix `owner` = row // J), with X_j = θ_j − p,
    p = θ at depth 0, and S_j = Σ_{i<j} X_i over the earlier rollouts of the same prefix: `total` [B, K, |𝒜|] holds
    Σ θ_i over those of earlier chunks, and is updated with this one."""
    position = start + torch.arange(len(owner))
    earlier = position - owner * rollouts  # j − 1: rollouts of the same prefix before this one
    running = thetas.cumsum(0) - thetas  # Σ over the chunk's rows before each row
    first_row = (owner * rollouts - start).clamp(min=0)  # the chunk row where each prefix's rollouts begin
    before = total[owner] + running - running[first_row]
    total.index_add_(0, owner, thetas)
    p = thetas[:, :1]
    return rollout_terms(before - earlier[:, None, None] * p, thetas, p)


def exact_is_affordable(num_labels: int, horizon: int, exact_budget: int = EXACT_BUDGET) -> bool:
    """Whether the deepest level of exact enumeration, |𝒜|^{K−1} nodes per prefix, fits `exact_budget`."""
    return num_labels ** (horizon - 1) <= exact_budget


def kstep_predictives(
    batch: AnswerProcess,
    horizon: int,
    num_rollouts: int,
    generator: torch.Generator,
    exact_budget: int = EXACT_BUDGET,
    budget: int = BATCH_BUDGET,
) -> KStep:
    """p^(k), k = 1 … `horizon`: exact when |𝒜|^{horizon−1} ≤ `exact_budget`, else Monte Carlo with J rollouts."""
    if exact_is_affordable(batch.dist.probs.shape[1], horizon, exact_budget):
        return kstep_exact(batch, horizon, budget)
    return kstep_monte_carlo(batch, horizon, num_rollouts, generator, budget)
