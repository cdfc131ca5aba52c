"""Size and power of the EMD drift test (`diagnostics.drift_test`) on simulated processes, beside the t-test it
replaced.

Each run draws Q questions with θ_0 from the process's start law and measures them as `question_emd` does: p^(k) by
J Monte Carlo rollouts (`kstep_monte_carlo`, forced even where enumeration would be affordable) at the prefix of each
length n ∈ {0, 2, 4, 6, 8} of one sampled path (EMD‾, k = 2 … 10) and at each b = 0 … 10 of another (EMD_10(b)). A
run is flagged where the betting test over its questions (`drift_test` with the increments `KStep.bets`) has
p < 2.5%. Processes θ_{t+1} = (1 − w_t) θ_t + w_t e_{A_{t+1}} (exact martingales whenever w_t does not depend on
A_{t+1}) with step schedules:

- urn-α1 / urn-α20: Pólya urns with prior mass α = 1 / 20 (w_t = 1/(α + t + 1)), θ_0 ~ Dirichlet(1);
- vertex-ε: Pólya urns with α = 5 started at θ_max = 1 − ε (the rest ε/(|𝒜| − 1) each): near-certain questions;
- constant-0.3: w_t = 0.3; constant-0.7: w_t = 0.7 with θ_0 ~ Dirichlet(0.3);
- growing: w_t = min(0.05 (t + 1), 0.9); absorbing: w_t = min(0.2 (t + 1), 1) (at a vertex from the 5th answer);
- heavy: random w_t = min(1, 0.02 / U), U ~ U(0, 1) (Pareto tail: most steps ≤ 0.04, 2% jump to a vertex);
- pull-λ (power): the constant-0.3 process, then θ ← (1 − λ) θ + λ e_0 (drawn towards option 0: not a martingale).

Prints, per process × |𝒜| × J × Q, the flag rate (%) of EMD‾ and of every EMD_10(b) over R runs; `max` is the largest
of them with ✓ where it is within nominal + 2 s.e. (s.e. √(0.025 · 0.975 / R)); last, the rates of the one-sided
t-test over questions of Û that the drift test used before (EMD‾ / largest over b).

    python bench/drift_floor.py [--runs 300] [--seed 0] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import product

import numpy as np
import torch
from scipy import stats

from beliefdrift.diagnostics.drift_test import DRIFT_LEVEL, drift_test
from beliefdrift.diagnostics.kstep import kstep_monte_carlo
from beliefdrift.diagnostics.noise_floor import StepProcess, urn_step
from beliefdrift.engine.resampling import make_generator, sample_answers

PREFIX_LENGTHS = (0, 2, 4, 6, 8)
HORIZON = 10  # K of EMD‾ and k of EMD_k(b)
BURN_IN = 10
#: the next weight from the current one, drawing from the generator where the schedule is random
Schedule = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


class PulledProcess(StepProcess):
    """A `StepProcess` whose θ is then pulled towards option 0 by `pull` each step: E[θ_{t+1} | θ_t] ≠ θ_t."""

    pull = 0.0

    def step(self, probs: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        moved = super().step(probs, answer)
        return (1 - self.pull) * moved + self.pull * torch.nn.functional.one_hot(
            torch.zeros_like(answer), probs.shape[1]).to(probs.dtype)


def pulled(pull: float) -> type[PulledProcess]:
    """A `PulledProcess` class with the given pull."""
    return type(f"Pulled{pull}", (PulledProcess,), {"pull": pull})


def dirichlet(concentration: float) -> Callable[[int, int, torch.Generator], torch.Tensor]:
    """θ_0 ~ Dirichlet(concentration) over the options (numpy's, seeded from the generator)."""
    def draw(size: int, options: int, generator: torch.Generator) -> torch.Tensor:
        rng = np.random.default_rng(int(torch.randint(2**62, (), generator=generator)))
        return torch.from_numpy(rng.dirichlet(np.full(options, concentration), size))
    return draw


def vertex(epsilon: float) -> Callable[[int, int, torch.Generator], torch.Tensor]:
    """θ_0 = (1 − ε, ε/(|𝒜| − 1), …) for every question."""
    def start(size: int, options: int, generator: torch.Generator) -> torch.Tensor:
        theta = torch.full((size, options), epsilon / (options - 1), dtype=torch.float64)
        theta[:, 0] = 1 - epsilon
        return theta
    return start


@dataclass(frozen=True)
class Setting:
    """A simulated process: its first weight, weight schedule, start law and class."""

    name: str
    first: float
    next_weight: Schedule
    start: Callable[[int, int, torch.Generator], torch.Tensor] = dirichlet(1.0)
    process: type[StepProcess] = StepProcess


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
         Setting("constant-0.7", 0.7, constant, dirichlet(0.3)), Setting("growing", 0.05, growing),
         Setting("absorbing", 0.2, absorbing), Setting("heavy", 0.02, heavy))
VERTICES = tuple(Setting(f"vertex-{epsilon:g}", 1 / 6, urn, vertex(epsilon)) for epsilon in (1e-3, 1e-4, 1e-5))
DRIFTS = (Setting("pull-0.01", 0.3, constant, process=pulled(0.01)),
          Setting("pull-0.02", 0.3, constant, process=pulled(0.02)))
#: (settings, options, J, Q) of every block of cells
GRID = (
    (NULLS, (2, 5), (8, 32), (30,)),
    (VERTICES, (4,), (8, 16, 32), (30,)),
    ((NULLS[3], NULLS[6], VERTICES[1]), (3,), (8,), (10, 100)),
    (DRIFTS, (2, 5), (8, 32), (30,)),
)
QUICK = (((NULLS[3], VERTICES[1], DRIFTS[0]), (4,), (16,), (30,)),)


@dataclass(frozen=True)
class Simulated:
    """Per run and question: Û of EMD‾ [R, Q] and of EMD_10(b) [R, Q, B+1]; the betting increments of EMD‾ [R, Q, ·]
    and of EMD_10(b) [R, Q, B+1, ·]."""

    bar: torch.Tensor
    curve: torch.Tensor
    bar_bets: torch.Tensor
    curve_bets: torch.Tensor


def simulate(setting: Setting, options: int, rollouts: int, questions: int, runs: int, seed: int,
             budget: int = 1 << 17) -> Simulated:
    """Measure R runs of Q questions of `setting` as `question_emd` does (Monte Carlo predictives)."""
    generator = make_generator(seed, setting.name, str(options), str(rollouts), str(questions))
    size = runs * questions
    schedule = partial(setting.next_weight, generator=generator)
    root = setting.process(setting.start(size, options, generator), torch.full((size,), setting.first,
                                                                              dtype=torch.float64), schedule)
    paths = [sample_answers(root.select(torch.arange(size)), steps, generator)[0]  # type: ignore[arg-type]
             for steps in (max(PREFIX_LENGTHS), BURN_IN)]
    drifts, bets = [], []
    for path, lengths, k in zip(paths, (PREFIX_LENGTHS, range(BURN_IN + 1)), (None, HORIZON), strict=True):
        for n in lengths:
            state = root.select(torch.arange(size))
            state.advance(path[:, :n])
            kstep = kstep_monte_carlo(state, HORIZON, rollouts, generator, budget)  # type: ignore[arg-type]
            drifts.append(kstep.sq_drift())
            bets.append(kstep.bets(k))
    first = len(PREFIX_LENGTHS)
    bar = torch.stack(drifts[:first], 1).mean((1, 2)).reshape(runs, questions)
    curve = torch.stack([d[:, -1] for d in drifts[first:]], 1).reshape(runs, questions, -1)
    bar_bets = torch.cat(bets[:first], 1).reshape(runs, questions, -1)
    curve_bets = torch.stack(bets[first:], 1).reshape(runs, questions, BURN_IN + 1, -1)
    return Simulated(bar, curve, bar_bets, curve_bets)


def flag_rates(simulated: Simulated) -> tuple[float, list[float]]:
    """The share of runs `drift_test` flags, for EMD‾ and at every b."""
    def rate(values: torch.Tensor, bets: torch.Tensor) -> float:
        return sum(bool(drift_test(run.tolist(), False, run_bets.numpy()).drifts)
                   for run, run_bets in zip(values, bets, strict=True)) / len(values)
    return (rate(simulated.bar, simulated.bar_bets),
            [rate(simulated.curve[:, :, b], simulated.curve_bets[:, :, b]) for b in range(BURN_IN + 1)])


def t_test_rates(simulated: Simulated) -> tuple[float, float]:
    """The share of runs the former one-sided t-test over questions of Û flags (p < 2.5%): EMD‾, largest over b."""
    def rate(values: np.ndarray) -> float:
        with warnings.catch_warnings(), np.errstate(all="ignore"):  # constant runs: p NaN, not flagged
            warnings.simplefilter("ignore", RuntimeWarning)
            p = stats.ttest_1samp(values, 0.0, axis=1, alternative="greater").pvalue
        return float(np.mean(np.nan_to_num(p, nan=1.0) < DRIFT_LEVEL))
    curve = simulated.curve.numpy()
    return rate(simulated.bar.numpy()), max(rate(curve[:, :, b]) for b in range(curve.shape[-1]))


def grid_cells(grid: Iterable[tuple[Iterable[Setting], Iterable[int], Iterable[int], Iterable[int]]]
               ) -> Iterator[tuple[Setting, int, int, int]]:
    """Every (setting, options, and two sizes) cell of a grid given as rows of (settings, options, sizes, sizes)."""
    for settings, *sizes in grid:
        yield from product(settings, *sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="three cells only (a smoke run)")
    args = parser.parse_args()
    se = 100 * math.sqrt(DRIFT_LEVEL * (1 - DRIFT_LEVEL) / args.runs)
    print(f"R = {args.runs} runs per cell; flag at p < {DRIFT_LEVEL}: nominal {100 * DRIFT_LEVEL:.1f}% (Monte Carlo "
          f"s.e. {se:.1f} points; ✓: every rate of the row ≤ nominal + 2 s.e. = {100 * DRIFT_LEVEL + 2 * se:.1f}%)\n")
    header = ["process", "options", "J", "Q", "EMD‾ %", *(f"b={b}" for b in range(BURN_IN + 1)), "max",
              "t-test before: EMD‾ / max b"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    start = time.perf_counter()
    for setting, options, rollouts, questions in grid_cells(QUICK if args.quick else GRID):
        simulated = simulate(setting, options, rollouts, questions, args.runs, args.seed)
        emd, per_b = flag_rates(simulated)
        largest = 100 * max(emd, *per_b)
        mark = " ✓" if setting not in DRIFTS and largest <= 100 * DRIFT_LEVEL + 2 * se else ""
        t_bar, t_b = t_test_rates(simulated)
        cells = [setting.name, str(options), str(rollouts), str(questions), f"{100 * emd:.1f}",
                 *(f"{100 * r:.1f}" for r in per_b), f"{largest:.1f}{mark}", f"{100 * t_bar:.1f} / {100 * t_b:.1f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
