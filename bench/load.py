"""Default-model load time: first load (GGUF dequantization + conversion cache) vs cached loads.

    python bench/load.py

Uses a fresh temporary cache directory, so the first load always converts; each load runs in its own
process and reports the time spent in `load_model` (the `import transformers` cost is printed apart).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

PROBE = """
import time
t0 = time.perf_counter()
from beliefdrift.backend import load_model
t1 = time.perf_counter()
load_model()
print(f"{t1 - t0:.2f} {time.perf_counter() - t1:.2f}")
"""


def timed_load(cache: str) -> tuple[float, float]:
    env = {**os.environ, "BELIEFDRIFT_CACHE": cache}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    imports, load = out.stdout.split()[-2:]
    return float(imports), float(load)


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        for label in ("first load (converts)", "second load (cached)", "third load (cached)"):
            imports, load = timed_load(cache)
            print(f"{label:24s} load_model {load:6.2f} s   (imports {imports:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
