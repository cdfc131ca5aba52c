"""Settings as plain data: the option machinery and parser (`options`), and each command's settings dataclasses.
Nothing here imports torch, transformers, peft or `backend/`."""
