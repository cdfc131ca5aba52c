"""EMD noise floor (Pólya urn): the EMD our estimator reports for an exact urn martingale measured with the same
settings. A reference, not a test: it is calibrated for urns only (a martingale whose steps do not shrink as
1/(α + t) scores above it); whether a figure is more than noise is `drift_test`'s, valid for every martingale
(docs/statistics.md).

With J Monte Carlo continuations p̂^(k) = (1/J) Σ_j θ^{(j)}_{n+k−1} is unbiased, but d(p̂^(k), p^(1)) ≥ 0 is not: a
martingale (p^(k) = p^(1)) scores E d(p̂^(k), θ_n) > 0, shrinking about as 1/√J for L1. Exact enumeration has no
such floor. The floor is what the unchanged estimator (`kstep_predictives`: same J, K, k and budgets, hence exact
or Monte Carlo as the measurement was) gives on a null process matched to each stored question × method record.

Null process: a Pólya urn (the Dirichlet–categorical predictive with concentration α),

    θ_{t+1} = (1 − w_t) θ_t + w_t e_{A_{t+1}},  w_{t+1} = w_t / (1 + w_t)   (w_t = 1 / (α + t + 1)),

an exact martingale, E[θ_{t+1} | θ_t] = θ_t, for every θ_0 and α: its EMD is 0, so whatever the estimator reports
on it is noise. Chosen over a bootstrap of the rollouts because the records keep only the averaged p̂^(k), and
resampling a drifting process's rollouts measures noise around its drift, not around a martingale; and over a
constant-step martingale because the urn is the Bayesian (c.i.d.) predictive the paper holds up as the ideal.
It has one parameter beyond θ, matched per question × method:

- θ at each measured prefix (and burn-in point) is the observed p^(1) there;
- α by the method of moments on the step-to-step variance of θ along J × N PPR paths the `emd` command samples
  for it (from the floor's generator): the urn has E[‖θ_{t+1} − θ_t‖² | θ_t] = w_t² (1 − ‖θ_t‖²), so w_0 solves
  Σ_{t<N} mean_j ‖θ^{(j)}_{t+1} − θ^{(j)}_t‖² = Σ_{t<N} w_t² mean_j (1 − ‖θ^{(j)}_t‖²). A prefix of length n
  continues the urn at w_n = w_0 / (1 + n w_0). (The urn's steps shrink as 1/(α + t); a model's need not: the
  match is on the total over the N answers the paths hold. Matching the spread across paths instead fails for
  seeded methods: their paths start apart and the model pulls them together, so that spread need not grow.)

Each of R replicates is a `QuestionEMD` of the urn, aggregated over questions by `aggregate_emd` as the
measurement is; the floor of an EMD figure is the mean of its R replicate values with their 2.5–97.5%
quantiles. `floor_p` = (1 + #{replicates ≥ measured}) / (R + 1) is the one-sided Monte Carlo p-value (no smaller
than 1 / (R + 1)), and `above_floor` its test at level 2.5%, `floor_p` ≤ 0.025: of size ≤ 2.5% for any R, and a
flagged value lies above the 97.5% quantile (exceeding that quantile alone flags 3.5% of null values at R = 100,
7% at R = 20, and none can pass the test below R = 39). The
floor needs only the stored records, no model, and draws from its own generator (run seed, question, method,
"floor"), so the measured numbers never change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from beliefdrift.backend import AnswerDist, LanguageModel
from beliefdrift.backend.model import EagerPaths
from beliefdrift.data.question import MCQuestion
from beliefdrift.diagnostics.emd import EMDConfig, EMDRow, QuestionEMD, aggregate_emd, predictives
from beliefdrift.diagnostics.kstep import exact_is_affordable
from beliefdrift.diagnostics.trajectory import unit_trajectories
from beliefdrift.engine.methods import Method
from beliefdrift.engine.resampling import QuestionRunner, make_generator
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING

LEVEL = 0.95  # two-sided coverage of the floor's interval
FLOOR_FIELDS = ("prefix_lengths", "prefixes", "seeds", "prefixes_exact", "kstep", "burn_in_first", "theta_step_sq",
                "theta_room")  # what `question_floor` reads from a stored record


def urn_step(weight: torch.Tensor) -> torch.Tensor:
    """The Pólya urn's next step weight: w_{t+1} = w_t / (1 + w_t)."""
    return weight / (1 + weight)


class StepProcess(EagerPaths):
    """Paths θ_{t+1} = (1 − w_t) θ_t + w_t e_{A_{t+1}}, A_{t+1} ~ θ_t, as an `AnswerProcess`: θ_t [B, |𝒜|] (float64)
    and the next step's weight w_t [B], updated by `next_weight` (the urn's by default). An exact martingale for
    every schedule of weights in [0, 1] that does not look at the answer drawn."""

    def __init__(self, probs: torch.Tensor, weight: torch.Tensor,
                 next_weight: Callable[[torch.Tensor], torch.Tensor] = urn_step):
        self.dist = AnswerDist(probs, torch.ones(len(probs), dtype=probs.dtype))
        self.weight = weight
        self.next_weight = next_weight

    @property
    def size(self) -> int:
        return len(self.weight)

    def select(self, index: torch.Tensor | list[int]) -> StepProcess:
        index = torch.as_tensor(index, dtype=torch.long)
        return type(self)(self.dist.probs[index], self.weight[index], self.next_weight)

    def reserve(self, answers: int) -> None:
        """Nothing to reserve: the process keeps no cache."""

    def step(self, probs: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        """θ after one answer [B]: (1 − w) θ + w e_a."""
        chosen = torch.nn.functional.one_hot(answer, probs.shape[1]).to(probs.dtype)
        return probs + self.weight[:, None] * (chosen - probs)

    def advance(self, answers: torch.Tensor) -> AnswerDist:
        """`step`, then w ← `next_weight`(w), once per column of answers [B, steps]."""
        probs = self.dist.probs
        for answer in answers.reshape(self.size, -1).T:
            probs = self.step(probs, answer)
            self.weight = self.next_weight(self.weight)
        self.dist = AnswerDist(probs, self.dist.valid_mass)
        return self.dist


def urn_weights(first: float, steps: int) -> torch.Tensor:
    """The urn's step weights w_t = w_0 / (1 + t w_0), t = 0 … steps − 1, from w_0 = `first`."""
    return first / (1 + torch.arange(steps, dtype=torch.float64) * first)


def spread_fields(thetas: torch.Tensor) -> dict[str, list[float]]:
    """What the floor matches, from paths' θ [J, N+1, |𝒜|]: per step t < N the means over paths of
    ‖θ_{t+1} − θ_t‖² (`theta_step_sq`) and of 1 − ‖θ_t‖² (`theta_room`)."""
    thetas = thetas.double().cpu()
    return {"theta_step_sq": (thetas[:, 1:] - thetas[:, :-1]).square().sum(-1).mean(0).tolist(),
            "theta_room": (1 - thetas[:, :-1].square().sum(-1)).mean(0).tolist()}


def fit_weight(step_sq: Sequence[float], room: Sequence[float], iterations: int = 60) -> float:
    """The urn's first step weight w_0 ∈ [0, 1] with Σ_t w_t² room_t = Σ_t step_sq_t (`spread_fields`), by
    bisection: the left side increases in w_0; 1 when even w_0 = 1 moves θ less than observed."""
    room_t = torch.tensor(room, dtype=torch.float64)
    if not len(room_t):
        raise ValueError("the noise floor needs paths of at least one answer (-N ≥ 1) to match the spread of θ")
    target = float(sum(step_sq))

    def moment(first: float) -> float:
        return float((urn_weights(first, len(room_t)).square() * room_t).sum())

    if target >= moment(1.0):
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(iterations):
        middle = (low + high) / 2
        low, high = (middle, high) if moment(middle) < target else (low, middle)
    return low


def floor_generator(seed: int, question: MCQuestion, method: Method, *keys: str) -> torch.Generator:
    """The floor's generators for one question × method (`keys` name a purpose): never the measurement's."""
    return make_generator(seed, question.id, method.name, "floor", *keys)


def missing_fields(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fields `question_floor` needs that some of `records` lack (stored before the noise floor existed)."""
    return sorted({name for record in records for name in FLOOR_FIELDS if name not in record})


def _urn_predictives(
    theta: torch.Tensor, weight: torch.Tensor, horizon: int, replicates: int, config: EMDConfig,
    generator: torch.Generator,
) -> tuple[torch.Tensor, bool]:
    """p^(k), k = 1 … `horizon`, of urns at θ [M, |𝒜|] with weights [M], estimated R times: [R, M, horizon, |𝒜|]
    (exact enumeration draws nothing, so its R replicates are one estimate repeated)."""
    rows, labels = theta.shape
    copies = 1 if exact_is_affordable(labels, horizon, config.exact_budget) else replicates
    urns = StepProcess(theta.repeat(copies, 1), weight.repeat(copies))
    result = predictives(urns, horizon, config, generator)
    return result.probs.reshape(copies, rows, horizon, labels).expand(replicates, -1, -1, -1), result.exact


def question_floor(
    record: Mapping[str, Any], config: EMDConfig, replicates: int, generator: torch.Generator
) -> list[QuestionEMD]:
    """R replicates of `question_emd`'s output for the urn matched to one stored question × method record."""
    missing = missing_fields([record])
    if missing:
        raise ValueError(f"records without {', '.join(missing)} (stored before the noise floor) give no floor; "
                         "run again into a new --out directory for one")
    w0 = fit_weight(record["theta_step_sq"], record["theta_room"])
    lengths = torch.tensor(record["prefix_lengths"], dtype=torch.float64)
    theta = torch.tensor(record["kstep"], dtype=torch.float64)[:, 0]
    kstep, exact = _urn_predictives(theta, w0 / (1 + lengths * w0), config.horizon, replicates, config, generator)
    first = torch.tensor(record["burn_in_first"], dtype=torch.float64)  # [B+1, P, |𝒜|]
    b = torch.arange(first.shape[0], dtype=torch.float64)[:, None].expand(first.shape[:2]).reshape(-1)
    burn_in, _ = _urn_predictives(first.reshape(-1, first.shape[-1]), w0 / (1 + b * w0), config.k, replicates,
                                  config, generator)
    burn_in = burn_in.reshape(replicates, *first.shape[:2], config.k, -1)
    return [
        QuestionEMD(
            prefix_lengths=tuple(record["prefix_lengths"]),
            prefixes=record["prefixes"],
            seeds=record["seeds"],
            kstep=kstep[r],
            exact=exact,
            prefixes_exact=record["prefixes_exact"],
            burn_in_first=burn_in[r, :, :, 0],
            burn_in_kth=burn_in[r, :, :, -1],
        )
        for r in range(replicates)
    ]


def _band(values: torch.Tensor, measured: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Mean, 2.5% and 97.5% quantiles over the R replicates (dim 0), the flag p ≤ 2.5% and the one-sided Monte Carlo
    p-value p = (1 + #{replicates ≥ measured}) / (R + 1)."""
    tail = (1 - LEVEL) / 2
    low, high = torch.quantile(values, torch.tensor([tail, 1 - tail], dtype=values.dtype), dim=0)
    p_value = (1 + (values >= measured).sum(0)).to(values.dtype) / (len(values) + 1)
    return values.mean(0), low, high, p_value <= tail, p_value


def replicate_summaries(
    records: Sequence[Mapping[str, Any]], generators: Sequence[torch.Generator], config: EMDConfig,
    replicates: int, distances: Sequence[str],
) -> list[list[dict[str, Any]]]:
    """For each replicate r, the `QuestionEMD.summary` of every question's matched urn (records and generators
    aligned by question): what `aggregate_emd` turns into one replicate of a method's EMD row."""
    per_question = [[urn.summary(distances) for urn in question_floor(record, config, replicates, generator)]
                    for record, generator in zip(records, generators, strict=True)]
    return [list(replicate) for replicate in zip(*per_question, strict=True)]


def method_floors(
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    records: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    seed: int = 0,
    config: EMDConfig | None = None,
    replicates: int = 100,
    distances: Sequence[str] = ("l1", "kl"),
) -> dict[str, list[list[dict[str, Any]]]]:
    """Each method's `replicate_summaries` over `questions` (`records[method name][i]` belongs to `questions[i]`),
    every question drawing from its own `floor_generator`. The defaults are the `emd` command's."""
    config = config or EMDConfig()
    return {m.name: replicate_summaries(records[m.name], [floor_generator(seed, q, m) for q in questions], config,
                                        replicates, distances)
            for m in methods}


def with_floor(
    row: EMDRow, measured: Sequence[Mapping[str, Any]], replicates: Sequence[Sequence[Mapping[str, Any]]]
) -> EMDRow:
    """`row` (aggregated from the per-question summaries `measured`) with the floor of EMD‾ and of EMD_k(b): the
    same aggregation applied to each urn replicate; and how many questions' EMD‾ lie above their own floor."""
    null_rows = [aggregate_emd(row.method, summaries, row.distance) for summaries in replicates]
    bars = torch.tensor([null.emd_bar for null in null_rows], dtype=torch.float64)
    floor, low, high, above, p_value = _band(bars, torch.tensor(row.emd_bar, dtype=torch.float64))
    curves = torch.tensor([null.burn_in for null in null_rows], dtype=torch.float64)
    curve, curve_low, curve_high, _, _ = _band(curves, torch.tensor(row.burn_in, dtype=torch.float64))
    key = f"emd_bar_{row.distance}"
    per_question = torch.tensor([[s[key] for s in summaries] for summaries in replicates], dtype=torch.float64)
    questions_above = _band(per_question, torch.tensor([s[key] for s in measured], dtype=torch.float64))[3]
    return replace(
        row, floor=float(floor), floor_low=float(low), floor_high=float(high), above_floor=bool(above),
        floor_p=float(p_value), floor_replicates=len(null_rows), burn_in_floor=curve.tolist(),
        burn_in_floor_low=curve_low.tolist(), burn_in_floor_high=curve_high.tolist(),
        questions_above_floor=int(questions_above.sum()),
    )


def noise_floor(
    lm: LanguageModel,
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    per_question: Mapping[str, Sequence[QuestionEMD]],
    *,
    config: EMDConfig | None = None,
    seed: int = 0,
    paths: int = 32,
    steps: int = 20,
    template: str = DEFAULT_PPR_TEMPLATE,
    template_ending: str = DEFAULT_TEMPLATE_ENDING,
    replicates: int = 100,
    distance: str = "l1",
) -> list[EMDRow]:
    """Each method's EMD row (`emd.emd_rows` of `per_question`, the output of `emd.emd_per_question` with the same
    `config` and `seed`) beside its Pólya-urn noise floor, as the `emd` command computes it: J × N PPR paths per
    question × method, from the floor's own generators, give the step spread of θ each urn is matched to, then
    `replicates` urns per question go through the same estimator (`method_floors`, `with_floor`). A method whose
    predictives were all enumerated exactly has no noise and gets no floor. The defaults are the `emd`
    command's."""
    config = config or EMDConfig()
    runners = [QuestionRunner(lm, question, template, template_ending) for question in questions]
    records: dict[str, list[dict[str, Any]]] = {}
    for method in methods:  # one call per method: base-model and adapter methods never share a batch
        trajectories = unit_trajectories([(runner, method) for runner in runners], paths, steps,
                                         [floor_generator(seed, q, method, "paths") for q in questions])
        records[method.name] = [{**result.record(), **spread_fields(traj.thetas)}
                                for result, traj in zip(per_question[method.name], trajectories, strict=True)]
    floors = method_floors(questions, methods, records, seed=seed, config=config, replicates=replicates,
                           distances=[distance])
    rows = []
    for method in methods:
        row = aggregate_emd(method.title, records[method.name], distance)
        exact = all(record["kstep_exact"] for record in records[method.name])
        rows.append(row if exact else with_floor(row, records[method.name], floors[method.name]))
    return rows
