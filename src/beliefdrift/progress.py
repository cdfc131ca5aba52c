"""Progress bars that one switch turns off (`show_progress`; the CLI's --quiet turns them off with its messages), the
package's own and Hugging Face's."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

#: Whether the package's progress bars show (`show_progress`; the CLI's --quiet turns them off with its messages).
_progress = {"show": True}


#: Libraries whose progress bars `show_progress` switches too, and the variable each reads when it is imported.
_HF_PROGRESS_SWITCHES = {"huggingface_hub": "HF_HUB_DISABLE_PROGRESS_BARS",
                         "datasets": "HF_DATASETS_DISABLE_PROGRESS_BARS"}


def show_progress(show: bool) -> None:
    """Turn every progress bar of the package on or off: `beliefdrift --quiet` turns them off as it lowers the
    messages to warnings (`cli.configure_logging`); in Python they show until this turns them off."""
    _progress["show"] = bool(show)
    # Hugging Face's own bars (hub downloads, `datasets`' split generation and maps) follow their switches: the
    # environment for a library imported later, its function for one imported already.
    for module, variable in _HF_PROGRESS_SWITCHES.items():
        if show:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = "1"
        if module in sys.modules:
            switches = sys.modules[module] if module == "datasets" else importlib.import_module(f"{module}.utils")
            (switches.enable_progress_bars if show else switches.disable_progress_bars)()


def progress_shown() -> bool:
    """Whether progress bars show now (`show_progress`)."""
    return _progress["show"]


def progress_bar(*args: Any, **kwargs: Any) -> Any:
    """A `tqdm` bar (same arguments), off while `show_progress(False)` holds; `disable=True` still turns one off.
    Every loop of the package draws its bar with this, so one switch silences them all."""
    from tqdm import tqdm

    kwargs["disable"] = bool(kwargs.get("disable")) or not _progress["show"]
    return tqdm(*args, **kwargs)
