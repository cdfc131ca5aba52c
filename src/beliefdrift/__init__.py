"""beliefdrift: measure and repair belief drift in language models answering multiple-choice questions."""

__version__ = "0.1.0"
