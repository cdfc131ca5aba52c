"""Settings of an evaluation run (`EvalConfig`: the model, data and sampling option groups plus the methods) and
how AM-PPR methods without an adapter are resolved."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from beliefdrift.config.options import (
    RUN_OUTPUTS,
    BatchingOptions,
    DataOptions,
    ModelOptions,
    ReportOptions,
    SamplingOptions,
    check_distinct_methods,
    option,
    out_option,
)
from beliefdrift.errors import UserError
from beliefdrift.registry import Method, canonical_methods, parse_method

log = logging.getLogger(__name__)

METHODS = ("ppr", "ppr-seed1", "ppr-seed5", "direct")


@dataclass(frozen=True)
class EvalConfig(ModelOptions, DataOptions, SamplingOptions, BatchingOptions, ReportOptions):
    """Everything an evaluation run needs; its run identity (`identity.run_identity`) is the part that determines
    the results."""

    _argument_group_name = "evaluation"
    outputs: ClassVar[tuple[str, ...]] = (*RUN_OUTPUTS, "tables.md", "tables.tex", "metrics.csv", "paired.md",
                                          "paired.csv", "summary.json")

    methods: list[str] = option(METHODS, "methods, e.g. direct ppr ppr-seed1 ppr-seed5 am-ppr-seed5")
    adapter: str | None = option(None, "LoRA adapter directory of the SC-tuned model (for am-ppr methods)")
    skip_long_prompts: bool = option(False, "skip (and count) questions whose prompt, seeds and answers exceed the "
                                            "model's context instead of stopping at the first")
    out: Path = out_option("beliefdrift-out/evaluate")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_distinct_methods(self.methods)

    @property
    def method_list(self) -> list[Method]:
        return [parse_method(name) for name in self.methods]


def resolve_methods(config: EvalConfig, given: bool = True) -> EvalConfig:
    """`config` with its methods canonical (parsed, de-duplicated, in table order). AM-PPR methods need an adapter:
    if they were not `given` explicitly (they come from a preset) and no adapter is set they are dropped with a note
    on stderr; asked for explicitly without one, they are an error."""
    methods = canonical_methods(config.methods)
    tuned = [name for name in methods if parse_method(name).needs_adapter]
    if tuned and not config.adapter:
        if given:
            raise UserError(f"methods {', '.join(tuned)} need --adapter (a LoRA adapter directory)")
        methods = tuple(name for name in methods if name not in tuned)
        log.warning("note: skipping %s: no --adapter given", ", ".join(tuned))
        if not methods:
            raise UserError("no methods left to run without --adapter")
    return dataclasses.replace(config, methods=list(methods))
