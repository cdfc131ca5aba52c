"""Direct query, answer seeding and prompted predictive resampling (PPR) trajectories.

A PPR trajectory samples A_{n+1} ~ θ_n = p(· | A_{1:n}, x_Q) over the label tokens and feeds it back;
J paths share one prefilled prompt. With SEED_m, path j first gets its own S^{(j)}_{1:m} drawn i.i.d.
from the direct-query θ, written as the first m lines of its answer list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from beliefdrift.backend.answer_tokens import AnswerTokens, resolve_answer_tokens, resolve_single_answer
from beliefdrift.backend.model import AnswerDist, AnswerPaths, LanguageModel, SteppedPaths
from beliefdrift.backend.sampling import inverse_cdf
from beliefdrift.data.question import MCQuestion
from beliefdrift.prompts import (
    DEFAULT_PPR_TEMPLATE,
    DEFAULT_TEMPLATE_ENDING,
    DIRECT_PREFILL,
    DIRECT_TEMPLATE,
    chat_context,
    question_prompt,
)


@dataclass(frozen=True)
class Trajectories:
    """J PPR paths of N generated answers each.

    answers[j, n] is A_{n+1} (label index); thetas[j, n] is θ_n (so N+1 of them: θ_N follows the last
    answer); valid_mass[j, n] the label mass of θ_n's full softmax; seeds[j] the m seed answers of path j,
    which precede the generated ones in the context and are never counted as answers.
    """

    answers: torch.Tensor  # [J, N] long
    thetas: torch.Tensor  # [J, N+1, K]
    valid_mass: torch.Tensor  # [J, N+1]
    seeds: torch.Tensor  # [J, m] long

    @property
    def num_paths(self) -> int:
        return self.answers.shape[0]

    @property
    def num_steps(self) -> int:
        return self.answers.shape[1]

    @property
    def num_labels(self) -> int:
        return self.thetas.shape[-1]


def make_generator(seed: int, *keys: object) -> torch.Generator:
    """A CPU generator seeded from `seed` and `keys` (e.g. question id, method), so each unit of work
    draws the same numbers whatever ran before it — runs can resume or shard without changing results."""
    digest = hashlib.sha256(repr((seed, *keys)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def direct_tokens(lm: LanguageModel, question: MCQuestion, ending: str = DEFAULT_TEMPLATE_ENDING) -> AnswerTokens:
    """The direct-query prompt (template `ending`) with the assistant turn prefilled by "Answer: "."""
    context = chat_context(lm.tokenizer, question_prompt(DIRECT_TEMPLATE, question, ending=ending), DIRECT_PREFILL)
    return resolve_single_answer(lm.tokenizer, context, question.labels)


def ppr_tokens(
    lm: LanguageModel,
    question: MCQuestion,
    template: str = DEFAULT_PPR_TEMPLATE,
    gen_len: int = 100,
    ending: str = DEFAULT_TEMPLATE_ENDING,
) -> AnswerTokens:
    """The PPR prompt (template `ending`) with an empty assistant turn, ready for a newline-separated answer list."""
    context = chat_context(lm.tokenizer, question_prompt(template, question, gen_len=gen_len, ending=ending))
    return resolve_answer_tokens(lm.tokenizer, context, question.labels)


def direct_query(lm: LanguageModel, question: MCQuestion, ending: str = DEFAULT_TEMPLATE_ENDING) -> AnswerDist:
    """Exact direct-query θ over the labels (probs [K], valid_mass scalar), on the CPU."""
    dist = lm.prefill(direct_tokens(lm, question, ending)).dist.cpu()
    return AnswerDist(dist.probs[0], dist.valid_mass[0])


def draw_labels(probs: torch.Tensor, count: int, generator: torch.Generator, replacement: bool = False) -> torch.Tensor:
    """`torch.multinomial(probs, count)` on the device of `probs`, driven by the CPU `generator`: on another device
    a generator there is seeded from the next draw of `generator`, so a run stays reproducible and the host
    never waits for the device."""
    if probs.device != generator.device:
        seed = int(torch.randint(2**63 - 1, (), generator=generator))
        generator = torch.Generator(probs.device).manual_seed(seed)
    return torch.multinomial(probs, count, replacement=replacement, generator=generator)


Streams = Sequence[tuple[int, torch.Generator]]  # (block size, generator) for consecutive blocks of paths


def blockwise_draws(streams: Streams) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """Each step's answers [B, 1] from θ [B, K]: `torch.multinomial` per block of paths with its generator (on the
    CPU, the streams every stored result was drawn with)."""
    sizes = [size for size, _ in streams]

    def draw(probs: torch.Tensor, step: int) -> torch.Tensor:
        blocks = probs.split(sizes)
        return torch.cat([draw_labels(p, 1, g) for p, (_, g) in zip(blocks, streams, strict=True)])

    return draw


def up_front_uniforms(streams: Streams, steps: int, device: torch.device) -> torch.Tensor:
    """The uniforms of every step for the whole batch [steps, B, 1] (float64, on `device`): each block's [steps, size]
    drawn on the host from its generator (so a block's answers depend neither on the other blocks nor on the step
    count), copied to `device` once."""
    uniforms = [torch.rand(steps, size, 1, generator=g, dtype=torch.float64) for size, g in streams]
    return torch.cat(uniforms, 1).to(device)


def up_front_draws(streams: Streams, steps: int, device: torch.device) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """Each step's answers [B, 1] from θ [B, K] by `inverse_cdf` of the `up_front_uniforms`, for the whole batch at
    once: a step launches a handful of kernels for the whole batch, none per block."""
    uniforms = up_front_uniforms(streams, steps, device)
    return lambda probs, step: inverse_cdf(probs, uniforms[step])


def answer_draws(streams: Streams, steps: int, device: torch.device) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """How `sample_answers` draws on `device`: block by block on the CPU (every stored number stays as it was), up
    front elsewhere (on a GPU a generator and kernels per block and step add host time to every step, graphed or
    not)."""
    return blockwise_draws(streams) if device.type == "cpu" else up_front_draws(streams, steps, device)


def draw_seeds(probs: torch.Tensor, num_paths: int, m: int, generator: torch.Generator) -> torch.Tensor:
    """Seed answers [J, m]: every entry i.i.d. from `probs` [K], an independent set per path."""
    if m == 0:
        return torch.empty(num_paths, 0, dtype=torch.long, device=probs.device)
    return draw_labels(probs.expand(num_paths, -1), m, generator, replacement=True)


def sample_answers(
    batch: SteppedPaths, steps: int, generator: torch.Generator | Streams
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Advance every path of `batch` by `steps` sampled answers.

    `generator` is one generator for the whole batch, or (block size, generator) pairs for consecutive
    blocks of paths that must draw their own streams (e.g. one block per method); see `answer_draws`.
    Returns answers [B, steps], θ [B, steps+1, K] (θ before each answer and after the last) and
    valid_mass [B, steps+1], on the model's device (nothing is copied to the host while sampling).
    Paths whose answer steps are static (`batch.answer_step`, `backend.EngineSettings`) draw up front on every device
    and run them as `StaticSteps` where their cache can (the shared prefix; the cache per path keeps the loop).
    """
    streams = [(batch.size, generator)] if isinstance(generator, torch.Generator) else list(generator)
    device = batch.dist.probs.device
    static = batch.answer_step.static
    advance = batch.static_steps(steps) if static and steps else None
    if advance is not None:
        bucket = StaticSteps(batch.dist, up_front_uniforms(streams, steps, device), advance)
        run_static_steps(bucket, steps, capture=batch.answer_step.capture and device.type == "cuda")
        batch.dist = AnswerDist(bucket.thetas[:, -1], bucket.masses[:, -1])
        return bucket.answers, bucket.thetas, bucket.masses
    batch.reserve(steps)
    draw = (up_front_draws if static else answer_draws)(streams, steps, device)
    thetas, masses, answers = [batch.dist.probs], [batch.dist.valid_mass], []
    for step in range(steps):
        answer = draw(batch.dist.probs, step)
        batch.advance(answer)
        answers.append(answer[:, 0])
        thetas.append(batch.dist.probs)
        masses.append(batch.dist.valid_mass)
    empty = torch.empty(batch.size, 0, dtype=torch.long, device=device)
    return (torch.stack(answers, 1) if answers else empty), torch.stack(thetas, 1), torch.stack(masses, 1)


class StaticSteps:
    """`sample_answers`' loop as one step function over tensors allocated once, for a bucket of B paths and N steps:
    the answers [B, N], θ [B, N+1, K] and label masses [B, N+1] it returns, the uniforms [N, B, 1] drawn up front, the
    step count n (on the device) and, inside `advance` (`PathBatch.static_steps`), the token ids, positions and static
    suffix cache of the passes. `step()` draws A_{n+1} = `inverse_cdf`(θ_n, u_n), writes it, advances every path by
    one pass, writes θ_{n+1} and its mass and counts n up, all on the device and in place: it reads nothing back to
    the host, branches on no value, and runs the same Python at every step, so one recorded step (a CUDA graph)
    replays all N. Its answers and θ are those of the eager loop drawing up front, up to the static suffix's rounding.
    """

    def __init__(self, dist: AnswerDist, uniforms: torch.Tensor, advance: Callable[[torch.Tensor], AnswerDist]):
        steps, size, _ = uniforms.shape
        self.uniforms = uniforms
        self.advance = advance
        self.answers = torch.zeros(size, steps, dtype=torch.long, device=uniforms.device)
        self.thetas = dist.probs.new_zeros(size, steps + 1, dist.probs.shape[-1])
        self.masses = dist.valid_mass.new_zeros(size, steps + 1)
        self.thetas[:, 0] = dist.probs
        self.masses[:, 0] = dist.valid_mass
        self.count = torch.zeros(1, dtype=torch.long, device=uniforms.device)

    def step(self) -> None:
        n = self.count
        answer = inverse_cdf(self.thetas.index_select(1, n)[:, 0], self.uniforms.index_select(0, n)[0])
        self.answers.index_copy_(1, n, answer)
        dist = self.advance(answer)
        self.thetas.index_copy_(1, n + 1, dist.probs[:, None])
        self.masses.index_copy_(1, n + 1, dist.valid_mass[:, None])
        self.count += 1


#: Steps run eagerly on a side stream before one is recorded as a CUDA graph (what capture asks for: the first passes
#: settle lazily made state, such as cuBLAS workspaces and the attention kernel's choice).
CAPTURE_WARM_UP = 2


class ReplayedStep:
    """A static step (its tensors allocated once, the same work at every call), run on each call: with `capture` (a
    CUDA device) the first `CAPTURE_WARM_UP` calls eagerly on a side stream, the next recorded as a CUDA graph
    (recording runs nothing) and that graph replayed for it and every later call, one launch per step. The replays
    compute what the eager steps compute, kernel for kernel; the host may read and write the step's buffers between
    calls."""

    def __init__(self, step: Callable[[], None], capture: bool = False):
        self.step = step
        self.capture = capture
        self._warm = 0
        self._side: torch.cuda.Stream | None = None
        self._graph: torch.cuda.CUDAGraph | None = None

    def __call__(self) -> None:
        if not self.capture:
            self.step()
        elif self._warm < CAPTURE_WARM_UP:
            side = self._side = self._side or torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step()
            torch.cuda.current_stream().wait_stream(side)
            self._warm += 1
        else:
            if self._graph is None:
                self._graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self._graph):
                    self.step()
            self._graph.replay()


def run_static_steps(bucket: StaticSteps, steps: int, capture: bool = False) -> None:
    """`steps` steps of `bucket`, with `capture` (a CUDA device) replayed from one recorded step (`ReplayedStep`;
    not where the warm-up would be all of them)."""
    step = ReplayedStep(bucket.step, capture and steps > CAPTURE_WARM_UP)
    for _ in range(steps):
        step()


@dataclass(frozen=True)
class PPRRequest:
    """One set of PPR paths to sample for a question: J paths, N answers, m seeds, its own RNG stream."""

    num_paths: int
    num_steps: int
    generator: torch.Generator
    num_seeds: int = 0


class QuestionRunner:
    """Everything sampled for one question, sharing work between methods: the direct-query θ and the PPR
    prompt are each computed once (one prefill) and forked for every method that needs them. Both prompts are
    rendered with `template_ending` (`prompts.TEMPLATE_ENDINGS`)."""

    def __init__(
        self,
        lm: LanguageModel,
        question: MCQuestion,
        template: str = DEFAULT_PPR_TEMPLATE,
        template_ending: str = DEFAULT_TEMPLATE_ENDING,
    ):
        self.lm = lm
        self.question = question
        self.template = template
        self.template_ending = template_ending

    @cached_property
    def direct(self) -> AnswerDist:
        """Exact direct-query θ over the labels (probs [K], valid_mass scalar)."""
        return direct_query(self.lm, self.question, self.template_ending)

    @cached_property
    def ppr_prompt(self) -> AnswerPaths:
        """The PPR prompt, prefilled once (a single path; fork it, never advance it)."""
        return self.lm.prefill(ppr_tokens(self.lm, self.question, self.template, ending=self.template_ending))

    def paths(self, num_paths: int, seeds: torch.Tensor | None = None) -> AnswerPaths:
        """`num_paths` fresh PPR paths, path j's context ending with its seeds (one forward pass)."""
        batch = self.ppr_prompt.fork(num_paths)
        if seeds is not None and seeds.shape[1] > 0:
            batch.advance(seeds)
        return batch

    def ppr(self, num_paths: int, num_steps: int, generator: torch.Generator, num_seeds: int = 0) -> Trajectories:
        """PPR (+SEED_m when `num_seeds` > 0): J paths of N answers."""
        return self.ppr_many([PPRRequest(num_paths, num_steps, generator, num_seeds)])[0]

    def ppr_many(self, requests: Sequence[PPRRequest]) -> list[Trajectories]:
        """Several PPR variants at once: their paths advance together, one forward pass per step (paths
        with fewer seeds are left-padded); each request draws from its own generator, seeds first."""
        return sample_many([(self, requests)])[0]

    def seeded_paths(self, requests: Sequence[PPRRequest]) -> tuple[list[torch.Tensor], AnswerPaths]:
        """Each request's seeds [J, m] (drawn first from its generator) and its paths, ready to sample."""
        seeds = [
            draw_seeds(self.direct.probs, r.num_paths, r.num_seeds, r.generator)
            if r.num_seeds  # the direct-query prefill is only paid for when seeds are drawn
            else torch.empty(r.num_paths, 0, dtype=torch.long)
            for r in requests
        ]
        batches = [self.paths(r.num_paths, s) for r, s in zip(requests, seeds, strict=True)]
        return seeds, batches[0].concat(batches)


def sample_many(jobs: Sequence[tuple[QuestionRunner, Sequence[PPRRequest]]]) -> list[list[Trajectories]]:
    """The PPR requests of several questions, their paths advanced together in one batch (one forward pass per
    step for all of them). Each request draws from its own generator and each question attends to its own
    prompt, so a question's trajectories do not depend on which others share its batch. Questions whose answers
    are other tokens (another number of options) go in separate batches."""
    groups: dict[tuple, list[int]] = {}
    for i, (runner, _) in enumerate(jobs):
        tokens = runner.ppr_prompt.tokens
        groups.setdefault(tuple(tokens.answer_ids(k) for k in range(len(tokens.label_ids))), []).append(i)
    results: list[list[Trajectories]] = [[] for _ in jobs]
    for members in groups.values():
        requests = [r for i in members for r in jobs[i][1]]
        seeds, batches = zip(*(jobs[i][0].seeded_paths(jobs[i][1]) for i in members), strict=True)
        batch = batches[0].concat(batches)
        steps = max(r.num_steps for r in requests)
        answers, thetas, masses = (
            t.cpu() for t in sample_answers(batch, steps, [(r.num_paths, r.generator) for r in requests])
        )
        blocks = [r.num_paths for r in requests]
        trajectories = iter(
            Trajectories(a[:, : r.num_steps], t[:, : r.num_steps + 1], v[:, : r.num_steps + 1], s)
            for r, s, a, t, v in zip(
                requests, (s for group in seeds for s in group), answers.split(blocks), thetas.split(blocks),
                masses.split(blocks), strict=True,
            )
        )
        for i in members:
            results[i] = [next(trajectories) for _ in jobs[i][1]]
    return results
