"""The `beliefdrift` command line: the parser and entry point (`main`), the sub-commands (one module each, each
exposing `add_parser`) and the `paper` pipeline beside its command."""
