"""Size and power of the EMD drift test (`diagnostics.drift_test`) on simulated processes, beside a one-sided t-test
over questions.

Each run draws Q questions with θ_0 from the process's start law and measures them as `question_emd` does: p^(k) by
J Monte Carlo rollouts (as `kstep_monte_carlo`, forced even where enumeration would be affordable) at the prefix of
each length n ∈ {0, 2, 4, 6, 8} of one sampled path (EMD‾, k = 2 … 10) and at each b of another (EMD_10(b)). A run is
flagged where the betting test over its questions (`betting_p` of the terms `KStep.bets`, as `drift_test` computes
it) has p < 2.5%. Processes θ_{t+1} = (1 − w_t) θ_t + w_t e_{A_{t+1}} (exact martingales whenever w_t does not depend on
A_{t+1}) with step schedules:

- urn-α1 / urn-α20: Pólya urns with prior mass α = 1 / 20 (w_t = 1/(α + t + 1)), θ_0 ~ Dirichlet(1);
- vertex-ε: Pólya urns with α = 5 started at θ_max = 1 − ε (the rest ε/(|𝒜| − 1) each): near-certain questions;
- constant-0.3: w_t = 0.3; constant-0.7: w_t = 0.7 with θ_0 ~ Dirichlet(0.3); tied: w_t = 0.3 from θ_0 uniform
  (every option tied for the mode);
- growing: w_t = min(0.05 (t + 1), 0.9); absorbing: w_t = min(0.2 (t + 1), 1) (at a vertex from the 5th answer);
- heavy: random w_t = min(1, 0.02 / U), U ~ U(0, 1) (Pareto tail: most steps ≤ 0.04, 2% jump to a vertex);
- jump-ε: w_t = 0.01 from θ_max = 1 − ε until an answer differs from the mode, 0.9 from then on (path-dependent).

Drifts (not martingales), all from the constant-0.3 process with θ_0 ~ Dirichlet(1):

- pull-λ: after each step θ ← (1 − λ) θ + λ e_0, towards a fixed option;
- reinforce-Δw: w = 0.3 + Δw when the answer is the mode of θ before it (lowest index among ties), else 0.3: each
  answer that agrees with the current mode moves θ further;
- sharpen-γ: after each step θ ← θ^γ / Σ_a θ(a)^γ.

The rollouts are drawn here by inverse-CDF draws, all questions of a chunk of runs at once; the statistics are the
project's (`rollout_terms`, `KStep.sq_drift`, `KStep.bets`, `betting_p`), and `--check` first compares them with
`kstep_monte_carlo` on the same draws. Null rows print the flag rate (%) of EMD‾ and the largest over b with ✓ where
every rate is within nominal + 2 s.e. (s.e. √(0.025 · 0.975 / R)), and the rates of the one-sided t-test over
questions of Û (p < 2.5%) on the same runs. Drift rows print the test's and the t-test's rates at EMD‾ and at b = 0,
5, 10, and ✓ where the test finds at least 80% of what the t-test finds in every cell the t-test finds in 50% of runs.

    nice python bench/drift_floor.py [--runs 300] [--seed 0] [--quick] [--check] [--blocks nulls vertices drifts]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import product

import numpy as np
import torch
from scipy import stats

from beliefdrift.diagnostics.drift_test import DRIFT_LEVEL, betting_p, rollout_terms
from beliefdrift.diagnostics.kstep import KStep, kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import StepProcess, urn_step
from beliefdrift.engine.resampling import inverse_cdf, make_generator, sample_answers

PREFIX_LENGTHS = (0, 2, 4, 6, 8)
HORIZON = 10  # K of EMD‾ and k of EMD_k(b)
BURN_IN = 10
DRIFT_POINTS = (0, 5, 10)  # the b of EMD_k(b) the drift rows measure
ROWS_PER_CHUNK = 1 << 18  # rollout rows held at once
#: the next weight from the current one, drawing from the generator where the schedule is random
Schedule = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
Start = Callable[[int, int, torch.Generator], torch.Tensor]


class SimulatedProcess(StepProcess):
    """A `StepProcess`, θ ← (1 − w) θ + w e_a, with options (class attributes; none by default): a step of w +
    `reinforce` on an answer that is the mode of θ before it, then θ ← (1 − `pull`) θ + `pull` e_0, then θ ←
    θ^`sharpen` normalised (each a drift: E[θ_{t+1} | θ_t] ≠ θ_t); and `jump`, the weight of every step after an answer
    that is not the mode (a path-dependent schedule, still a martingale: w is fixed before the answer it weighs)."""

    pull = 0.0
    reinforce = 0.0
    sharpen = 1.0
    jump = 0.0

    def step(self, probs: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        agrees = answer == probs.argmax(-1)
        weight = self.weight + self.reinforce * agrees if self.reinforce else self.weight
        moved = probs * (1 - weight[:, None])
        moved[torch.arange(len(answer)), answer] += weight
        if self.pull:
            moved *= 1 - self.pull
            moved[:, 0] += self.pull
        if self.sharpen != 1.0:
            moved = moved.clamp(min=0) ** self.sharpen
            moved /= moved.sum(-1, keepdim=True)
        if self.jump:
            self.weight = torch.where(agrees, self.weight, self.jump)
        return moved


def simulated(pull: float = 0.0, reinforce: float = 0.0, sharpen: float = 1.0, jump: float = 0.0
              ) -> type[SimulatedProcess]:
    """A `SimulatedProcess` class with the given options."""
    return type("Simulated", (SimulatedProcess,), {"pull": pull, "reinforce": reinforce, "sharpen": sharpen,
                                                    "jump": jump})


def dirichlet(concentration: float) -> Start:
    """θ_0 ~ Dirichlet(concentration) over the options (numpy's, seeded from the generator)."""
    def draw(size: int, options: int, generator: torch.Generator) -> torch.Tensor:
        rng = np.random.default_rng(int(torch.randint(2**62, (), generator=generator)))
        return torch.from_numpy(rng.dirichlet(np.full(options, concentration), size))
    return draw


def vertex(epsilon: float) -> Start:
    """θ_0 = (1 − ε, ε/(|𝒜| − 1), …) for every question."""
    def start(size: int, options: int, generator: torch.Generator) -> torch.Tensor:
        theta = torch.full((size, options), epsilon / (options - 1), dtype=torch.float64)
        theta[:, 0] = 1 - epsilon
        return theta
    return start


def uniform(size: int, options: int, generator: torch.Generator) -> torch.Tensor:
    """θ_0 = (1/|𝒜|, …): every option tied."""
    return torch.full((size, options), 1 / options, dtype=torch.float64)


@dataclass(frozen=True)
class Setting:
    """A simulated process: its first weight, weight schedule, start law and class."""

    name: str
    first: float
    next_weight: Schedule
    start: Start = dirichlet(1.0)
    process: type[SimulatedProcess] = SimulatedProcess


def urn(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The urn's w_{t+1} = w_t / (1 + w_t)."""
    return urn_step(weight)


def constant(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """w_{t+1} = w_t."""
    return weight


def growing(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """w_{t+1} = min(w_t + 0.05, 0.9)."""
    return (weight + 0.05).clamp(max=0.9)


def absorbing(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """w_{t+1} = min(w_t + 0.2, 1): a weight of 1 moves θ onto the vertex of the answer, where it stays."""
    return (weight + 0.2).clamp(max=1.0)


def heavy(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """w_{t+1} = min(1, 0.02 / U), U ~ U(0, 1), independent of everything before."""
    return (0.02 / torch.rand(weight.shape, generator=generator, dtype=torch.float64)).clamp(max=1.0)


NULLS = (Setting("urn-α1", 1 / 2, urn), Setting("urn-α20", 1 / 21, urn), Setting("constant-0.3", 0.3, constant),
         Setting("constant-0.7", 0.7, constant, dirichlet(0.3)), Setting("tied", 0.3, constant, uniform),
         Setting("growing", 0.05, growing), Setting("absorbing", 0.2, absorbing), Setting("heavy", 0.02, heavy))
VERTICES = tuple(Setting(f"vertex-{epsilon:g}", 1 / 6, urn, vertex(epsilon)) for epsilon in (1e-3, 1e-4, 1e-5))
JUMPS = tuple(Setting(f"jump-{epsilon:g}", 0.01, constant, vertex(epsilon), simulated(jump=0.9))
              for epsilon in (1e-3, 1e-5))
DRIFTS = (*(Setting(f"pull-{pull:g}", 0.3, constant, process=simulated(pull=pull)) for pull in (0.01, 0.02)),
          *(Setting(f"reinforce-{dw:g}", 0.3, constant, process=simulated(reinforce=dw)) for dw in (0.05, 0.15, 0.3)),
          *(Setting(f"sharpen-{g:g}", 0.3, constant, process=simulated(sharpen=g)) for g in (1.03, 1.1, 1.3)))
#: Blocks of cells: (settings, options, J, Q) rows.
GRID = {
    "nulls": ((NULLS, (2, 5), (8, 32), (30,)), ((NULLS[3], NULLS[7]), (3,), (8,), (10, 100))),
    "vertices": ((VERTICES, (4,), (8, 32), (30,)), (VERTICES, (2, 10), (8,), (30,)),
                 (VERTICES[1:2], (3,), (8,), (100,)), (JUMPS, (4,), (8, 32), (30,))),
    "drifts": ((DRIFTS, (2, 5), (8, 32), (10, 30, 100)),),
}
QUICK = {"nulls": (((NULLS[3],), (4,), (16,), (30,)),), "vertices": (((VERTICES[1],), (4,), (16,), (30,)),),
         "drifts": (((DRIFTS[0], DRIFTS[3], DRIFTS[6]), (4,), (16,), (30,)),)}


def draw_answers(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One answer per row of θ [B, |𝒜|] by an inverse-CDF draw: [B, 1]."""
    return inverse_cdf(probs, torch.rand(len(probs), 1, generator=generator, dtype=torch.float64))


def rollouts(state: StepProcess, horizon: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """θ along `count` continuations of depth horizon − 1 of every path of `state`: [B, J, horizon, |𝒜|] (depth 0
    is the path's own θ; the rows in `kstep_monte_carlo`'s order)."""
    batch = state.select(torch.arange(state.size).repeat_interleave(count))
    thetas = [batch.dist.probs]
    for _ in range(horizon - 1):
        thetas.append(batch.advance(draw_answers(batch.dist.probs, generator)).probs)
    return torch.stack(thetas, 1).view(state.size, count, horizon, -1)


def assemble(thetas: torch.Tensor) -> KStep:
    """The `KStep` that `kstep_monte_carlo` returns for the rollouts `thetas` [B, J, K, |𝒜|] drawn in this order: p̂^(k),
    the mean ‖θ‖², and the drift test's Y_j, L_j, U_j of every rollout from S_j = Σ_{i<j} (θ_i − p) (θ renormalised)."""
    count = thetas.shape[1]
    simplex = thetas / thetas.sum(-1, keepdim=True)
    start = simplex[:, :1, :1]
    steps = simplex - start
    cross, least, most = rollout_terms(steps.cumsum(1) - steps, simplex, start)
    first = start[:, 0, 0]
    return KStep(thetas.mean(1), exact=False, sq=thetas.square().sum(-1).mean(1), rollouts=count, cross=cross,
                 least=least, most=most, spread=(first * (1 - first)).sum(-1))


def check(setting: Setting, options: int = 3, rollouts_per_prefix: int = 6, seed: int = 0) -> None:
    """`assemble` and the statistics on the rollouts that `kstep_monte_carlo` draws (drawn again from a copy of its
    generator) against what it returns: Û and the betting terms to 1e-12."""
    generator = make_generator(seed, "check", setting.name)
    size = 7
    process = setting.process(setting.start(size, options, generator), torch.full((size,), setting.first,
                                                                                dtype=torch.float64),
                              partial(setting.next_weight, generator=generator))
    process.advance(sample_answers(process.select(torch.arange(size)), 3, generator)[0])  # type: ignore[arg-type]
    replay = torch.Generator().set_state(generator.get_state())
    measured = kstep_monte_carlo(process, HORIZON, rollouts_per_prefix, generator)  # type: ignore[arg-type]
    _, thetas, _ = sample_answers(process.select(torch.arange(size).repeat_interleave(rollouts_per_prefix)),  # type: ignore[arg-type]
                                  HORIZON - 1, replay)
    rebuilt = assemble(thetas.double().view(size, rollouts_per_prefix, HORIZON, options))
    assert torch.allclose(rebuilt.sq_drift(), measured.sq_drift(), atol=1e-12, rtol=0)
    for k in (None, HORIZON):
        assert torch.allclose(rebuilt.bets(k), measured.bets(k), atol=1e-12, rtol=1e-10), (setting.name, k)


@dataclass(frozen=True)
class Measured:
    """Per run: the drift test's p and the t-test's p, for EMD‾ [R] and at each measured b [R, len(points)]."""

    p_bar: np.ndarray
    p_b: np.ndarray
    t_bar: np.ndarray
    t_b: np.ndarray


def t_test_p(values: np.ndarray) -> np.ndarray:
    """One-sided t-test over questions (last axis) that the mean Û exceeds 0 (1 for a constant sample)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        p = stats.ttest_1samp(values, 0.0, axis=-1, alternative="greater").pvalue
    return np.nan_to_num(p, nan=1.0)


def simulate(setting: Setting, options: int, count: int, questions: int, runs: int, seed: int,
             points: Sequence[int]) -> Measured:
    """R runs of Q questions of `setting`, measured at EMD‾ and at each b of `points`, a chunk of runs at a time."""
    generator = make_generator(seed, setting.name, str(options), str(count), str(questions))
    schedule = partial(setting.next_weight, generator=generator)
    chunk = max(1, ROWS_PER_CHUNK // (questions * count))
    parts = []
    for first_run in range(0, runs, chunk):
        size = min(chunk, runs - first_run) * questions
        root = setting.process(setting.start(size, options, generator), torch.full((size,), setting.first,
                                                                                  dtype=torch.float64), schedule)
        paths = [sample_answers(root.select(torch.arange(size)), steps, generator)[0]  # type: ignore[arg-type]
                 for steps in (max(PREFIX_LENGTHS), max(points))]
        measured = []
        for path, lengths, depths in ((paths[0], PREFIX_LENGTHS, slice(None)), (paths[1], points, [0, -1])):
            for n in lengths:
                state = root.select(torch.arange(size))
                state.advance(path[:, :n])
                kstep = assemble(rollouts(state, HORIZON, count, generator)[:, :, depths])  # EMD_k(b): k only
                measured.append((kstep.sq_drift(), kstep.bets(None)))
        bar = torch.stack([d for d, _ in measured[:len(PREFIX_LENGTHS)]], 1).mean((1, 2)).view(-1, questions)
        bar_terms = torch.stack([t for _, t in measured[:len(PREFIX_LENGTHS)]], 1).view(len(bar), -1, 3)
        curve = torch.cat([d for d, _ in measured[len(PREFIX_LENGTHS):]], 1).view(len(bar), questions, -1)
        per_b = [betting_p(t.reshape(len(bar), -1, 3).numpy()) for _, t in measured[len(PREFIX_LENGTHS):]]
        parts.append((betting_p(bar_terms.numpy()), t_test_p(bar.numpy()), np.stack(per_b, 1),
                      t_test_p(curve.numpy().transpose(0, 2, 1))))
    p_bar, t_bar, p_b, t_b = (np.concatenate(column) for column in zip(*parts, strict=True))
    return Measured(p_bar, p_b, t_bar, t_b)


def grid_cells(grid: Iterable[tuple[Iterable[Setting], Iterable[int], Iterable[int], Iterable[int]]]
               ) -> Iterator[tuple[Setting, int, int, int]]:
    """Every (setting, options, and two sizes) cell of a grid given as rows of (settings, options, sizes, sizes)."""
    for settings, *sizes in grid:
        yield from product(settings, *sizes)


def rate(p: np.ndarray) -> np.ndarray:
    """The share of runs flagged (p < `DRIFT_LEVEL`) in %, over the first axis."""
    return 100 * np.mean(p < DRIFT_LEVEL, axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="one cell per block (a smoke run)")
    parser.add_argument("--check", action="store_true", help="compare with kstep_monte_carlo first")
    parser.add_argument("--blocks", nargs="+", choices=list(GRID), default=list(GRID))
    args = parser.parse_args()
    if args.check:
        for setting in (NULLS[3], VERTICES[0], JUMPS[0], *DRIFTS):  # deterministic schedules: the replay draws alike
            check(setting)
        print("checked: Û and the betting terms equal kstep_monte_carlo's on its own draws\n")
    se = 100 * math.sqrt(DRIFT_LEVEL * (1 - DRIFT_LEVEL) / args.runs)
    limit = 100 * DRIFT_LEVEL + 2 * se
    print(f"R = {args.runs} runs per cell; flag at p < {DRIFT_LEVEL}: nominal {100 * DRIFT_LEVEL:.1f}% (Monte Carlo "
          f"s.e. {se:.1f} points; ✓: every rate ≤ nominal + 2 s.e. = {limit:.1f}%)")
    start = time.perf_counter()
    grid = QUICK if args.quick else GRID
    for block in args.blocks:
        drifts = block == "drifts"
        points = DRIFT_POINTS if drifts else tuple(range(BURN_IN + 1))
        if drifts:
            header = ["process", "options", "J", "Q", "EMD‾ % (t-test)", *(f"b={b} % (t-test)" for b in points),
                      "≥ 80% of the t-test"]
        else:
            header = ["process", "options", "J", "Q", "EMD‾ %", "largest over b %", "t-test: EMD‾ / largest b"]
        print(f"\n| {' | '.join(header)} |\n|" + "---|" * len(header))
        for setting, options, count, questions in grid_cells(grid[block]):
            measured = simulate(setting, options, count, questions, args.runs, args.seed, points)
            test = [float(rate(measured.p_bar)), *rate(measured.p_b)]
            t_test = [float(rate(measured.t_bar)), *rate(measured.t_b)]
            cells = [setting.name, str(options), str(count), str(questions)]
            if drifts:
                ratios = [a / b for a, b in zip(test, t_test, strict=True) if b >= 50]
                mark = "–" if not ratios else "✓" if min(ratios) >= 0.8 else f"✗ ({min(ratios):.2f})"
                cells += [f"{a:.1f} ({b:.1f})" for a, b in zip(test, t_test, strict=True)] + [mark]
            else:
                mark = " ✓" if max(test) <= limit else ""
                cells += [f"{test[0]:.1f}", f"{max(test[1:]):.1f}{mark}", f"{t_test[0]:.1f} / {max(t_test[1:]):.1f}"]
            print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
