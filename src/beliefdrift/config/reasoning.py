"""Settings of the chain-of-thought experiment as plain data (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

#: How a thought–answer pair is embedded: the model's mean last hidden state, or all-MiniLM-L6-v2 (extra).
EMBEDDINGS = ("hidden", "sentence")


@dataclass(frozen=True)
class ReasoningConfig:
    """R rollouts of up to N pairs; m reasoning seeds (0: no seeded condition); lag τ; sampling; guided
    decoding (tags written for the model, see `DecodeConfig`) or free (the paper's prompt-only setting)."""

    rollouts: int = 8
    pairs: int = 10
    seeds: int = 5
    tau: int = 5
    max_new_tokens: int = 1536
    seed_max_new_tokens: int = 384
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 0
    embedding: str = "hidden"
    guided: bool = True
    max_solution_tokens: int = 192

    def __post_init__(self) -> None:
        if self.rollouts < 1 or self.pairs < 1 or self.seeds < 0 or self.tau < 1:
            raise ValueError(f"need R >= 1, N >= 1, m >= 0 and tau >= 1, got {self}")
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"unknown embedding {self.embedding!r}; expected one of {EMBEDDINGS}")

    @property
    def conditions(self) -> list[tuple[str, str, int]]:
        """(key, title, m) of each condition: PPR, and PPR + SEED_m when m > 0."""
        plain = [("ppr", "PPR", 0)]
        return plain + ([(f"ppr-seed{self.seeds}", f"PPR + SEED_{self.seeds}", self.seeds)] if self.seeds else [])
