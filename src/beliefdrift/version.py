"""The package's version: part of every run identity (a new version refuses to resume an old run store)."""

__version__ = "0.2.0"
