"""`make fuzz`: run every fuzz target of tests/fuzz/targets.py at scale and print JSON counts.

Unlike the pytest run, a failing input does not stop a target: each crash (an exception other than the
target's documented error) and each property violation is counted, and the first few are kept with their
input, so one run says how many inputs of each kind broke and how. Exit status 1 when any did.

    .venv/bin/python scripts/fuzz.py [--inputs 100000] [--target NAME ...] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz.targets import TARGETS, Target, Violation

KEPT = 3
"""Failing inputs kept per target and kind."""


@dataclass
class Counts:
    inputs: int = 0
    accepted: int = 0
    rejected: int = 0
    crashes: int = 0
    violations: int = 0
    seconds: float = 0.0
    examples: list[dict[str, str]] = field(default_factory=list)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 600 else text[:600] + "..."


def run_target(target: Target, inputs: int, rng_seed: int) -> Counts:
    counts = Counts()

    def one(value: Any) -> None:
        counts.inputs += 1
        try:
            if target.run(value):
                counts.accepted += 1
            else:
                counts.rejected += 1
        except Violation as e:
            counts.violations += 1
            if sum(x["kind"] == "violation" for x in counts.examples) < KEPT:
                counts.examples.append({"kind": "violation", "error": str(e), "input": _shown(value)})
        except Exception as e:  # every crash is counted, not raised
            counts.crashes += 1
            if sum(x["kind"] == "crash" for x in counts.examples) < KEPT:
                where = traceback.extract_tb(e.__traceback__)[-1]
                counts.examples.append({"kind": "crash", "error": f"{type(e).__name__}: {e}"[:400],
                                        "at": f"{where.filename}:{where.lineno}", "input": _shown(value)})

    started = time.monotonic()
    # Hypothesis stops early when a strategy's space is exhausted; run again with new seeds until done.
    for attempt in range(20):
        before = counts.inputs
        remaining = inputs - counts.inputs
        if remaining <= 0:
            break
        batch = settings(max_examples=remaining, deadline=None, database=None, phases=[Phase.generate],
                         suppress_health_check=list(HealthCheck))
        batch(seed(rng_seed + attempt)(given(target.strategy)(one)))()
        if counts.inputs == before:
            break
    counts.seconds = round(time.monotonic() - started, 2)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs in total, spread over the targets")
    parser.add_argument("--target", action="append", choices=[t.name for t in TARGETS])
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args(argv)
    targets = [t for t in TARGETS if not args.target or t.name in args.target]
    per_target = -(-args.inputs // len(targets))
    started = time.monotonic()
    results: dict[str, Counts] = {}
    for target in targets:
        results[target.name] = run_target(target, per_target, args.seed)
        print(f"fuzz: {target.name}: {results[target.name].inputs} inputs, {results[target.name].crashes} crashes,"
              f" {results[target.name].violations} violations", file=sys.stderr)
    doc = {
        "inputs": sum(c.inputs for c in results.values()),
        "crashes": sum(c.crashes for c in results.values()),
        "violations": sum(c.violations for c in results.values()),
        "seconds": round(time.monotonic() - started, 1),
        "seed": args.seed,
        "targets": {name: vars(c) for name, c in results.items()},
    }
    print(json.dumps(doc, indent=2))
    return 1 if doc["crashes"] or doc["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
