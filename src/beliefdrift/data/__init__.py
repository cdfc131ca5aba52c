"""Benchmarks as lists of `MCQuestion`s."""

from beliefdrift.data.question import LETTERS, MCQuestion

__all__ = ["LETTERS", "MCQuestion"]
