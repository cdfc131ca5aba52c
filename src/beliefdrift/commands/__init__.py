"""Sub-commands of the `beliefdrift` CLI, one module each (each exposes `add_parser`)."""
