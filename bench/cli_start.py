"""Start-up time of `nodegc --version`, `nodegc --help` and `nodegc scan --help` (median of N runs), JSON.

    .venv/bin/python bench/cli_start.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

NODEGC = Path(sys.executable).parent / "nodegc"


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, timeout=60)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    runs = p.parse_args().runs
    out = {"runs": runs, "python_bare_seconds": round(median_seconds([sys.executable, "-c", "pass"], runs), 4)}
    for name, argv in (("version", ["--version"]), ("help", ["--help"]), ("scan_help", ["scan", "--help"])):
        out[f"{name}_seconds"] = round(median_seconds([str(NODEGC), *argv], runs), 4)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
