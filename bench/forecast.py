"""IP range exhaustion forecast against synthetic series with known exhaustion times (JSON).

nodegc's model (peak held + leaked now, eaten at the Theil-Sen slope of the leaked count) and the
baseline (predict_linear of the reserved count), both over a one-hour window, forecast each series at
0.5, 1, 2, 4 and 8 hours before it fills. Errors are relative to the true time left.
"""

from __future__ import annotations

import argparse
import json
import time

from nodegc.sandbox.ipseries import evaluate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    result = evaluate(series=args.series, seed=args.seed)
    result["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
