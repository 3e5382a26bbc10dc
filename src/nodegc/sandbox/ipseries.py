"""Synthetic IP range series with a known exhaustion time, to measure forecasts against the truth.

One node, one range set of `capacity` addresses, sampled every `step` seconds (the agent's scan):
- held addresses (live pods and the young ones): a base level, a daily swing, noise, and rollouts that
  surge the pod count for a few minutes, capped at the kubelet's maxPods;
- leaks arrive as a Poisson process; each one sticks (reclaim blocked or failing for it) with
  probability `stick`, else it is reclaimed a few minutes later (nodegc's K scans and grace).
The series runs until held + leaked reaches the capacity: that instant is the truth a forecast made
earlier is judged against. Seeded, so a run is reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from nodegc.planning.ipranges import Sample


@dataclass(frozen=True)
class Scenario:
    capacity: int
    max_pods: int
    base: float
    swing: float
    phase: float
    rollouts_per_hour: float
    surge: float
    leaks_per_hour: float
    stick: float
    leaked_at_start: int
    step: float = 30.0


@dataclass(frozen=True)
class Series:
    scenario: Scenario
    samples: tuple[Sample, ...]
    exhausted_at: float | None
    """Time of the first sample at which the range was full; None if it never filled within the horizon."""


def random_scenario(rng: random.Random) -> Scenario:
    capacity = rng.choice((254, 510))
    max_pods = 110
    base = rng.uniform(20, 80)
    return Scenario(
        capacity=capacity, max_pods=max_pods, base=base, swing=rng.uniform(0, min(base, max_pods - base) * 0.8),
        phase=rng.uniform(0, 2 * math.pi), rollouts_per_hour=rng.uniform(0, 2), surge=rng.uniform(0.1, 0.5),
        leaks_per_hour=rng.uniform(3, 40), stick=rng.choice((1.0, 1.0, 0.7, 0.4)),
        leaked_at_start=rng.randrange(0, capacity // 3),
    )


def simulate(scenario: Scenario, rng: random.Random, *, horizon: float = 7 * 86400.0) -> Series:
    s = scenario
    samples: list[Sample] = []
    leaked = s.leaked_at_start
    pending: list[float] = []  # reclaim times of leaks that will be reclaimed
    surge_until = -1.0
    t = 0.0
    exhausted: float | None = None
    while t <= horizon:
        if rng.random() < s.rollouts_per_hour * s.step / 3600:
            surge_until = t + rng.uniform(300, 900)
        level = s.base + s.swing * math.sin(2 * math.pi * t / 86400 + s.phase)
        if t < surge_until:
            level *= 1 + s.surge
        held = max(0, min(s.max_pods, round(level + rng.gauss(0, 2))))
        new = _poisson(rng, s.leaks_per_hour * s.step / 3600)
        for _ in range(new):
            if rng.random() < s.stick:
                leaked += 1
            else:
                leaked += 1
                pending.append(t + rng.uniform(150, 300))
        reclaimed = [x for x in pending if x <= t]
        if reclaimed:
            pending = [x for x in pending if x > t]
            leaked -= len(reclaimed)
        reserved = min(s.capacity, held + leaked)
        samples.append(Sample(at=t, reserved=reserved, held=min(held, s.capacity - leaked) if leaked < s.capacity
                              else 0, leaked=min(leaked, s.capacity), allocated=0, new_leaks=new))
        if held + leaked >= s.capacity:
            exhausted = t
            break
        t += s.step
    return Series(scenario=s, samples=tuple(samples), exhausted_at=exhausted)


def _poisson(rng: random.Random, lam: float) -> int:
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


LEADS_HOURS = (0.5, 1.0, 2.0, 4.0, 8.0)
ALERT_HOURS = 4.0


def evaluate(*, series: int = 200, seed: int = 1, window: float = 3600.0) -> dict[str, object]:
    """Forecast every series at several lead times before its known exhaustion, with nodegc's model and
    with the predict_linear baseline; return error figures for both (JSON-ready)."""
    from nodegc.planning.ipranges import forecast, linear_exhaustion

    rng = random.Random(seed)  # noqa: S311 - reproducible synthetic data, not secrets
    errors: dict[str, list[float]] = {"nodegc": [], "predict_linear": []}
    by_lead: dict[str, dict[str, list[float]]] = {m: {str(h): [] for h in LEADS_HOURS} for m in errors}
    alerts = {m: {"should_fire": 0, "fired": 0, "should_not_fire": 0, "false_alarms": 0} for m in errors}
    used = 0
    while used < series:
        sim = simulate(random_scenario(rng), rng)
        if sim.exhausted_at is None or sim.exhausted_at < window + max(LEADS_HOURS) * 3600:
            continue
        used += 1
        for lead_h in LEADS_HOURS:
            lead = lead_h * 3600
            at = sim.exhausted_at - lead
            seen = [s for s in sim.samples if at - window <= s.at <= at]
            cap = sim.scenario.capacity
            predicted = {
                "nodegc": forecast(seen, cap).seconds_to_exhaustion,
                "predict_linear": linear_exhaustion([(s.at, float(s.reserved)) for s in seen], cap),
            }
            for method, value in predicted.items():
                err = abs(value - lead) / lead if math.isfinite(value) else math.inf
                errors[method].append(err)
                by_lead[method][str(lead_h)].append(err)
                fired = value <= ALERT_HOURS * 3600
                if lead_h < ALERT_HOURS:
                    alerts[method]["should_fire"] += 1
                    alerts[method]["fired"] += int(fired)
                elif lead_h > ALERT_HOURS:
                    alerts[method]["should_not_fire"] += 1
                    alerts[method]["false_alarms"] += int(fired)
    out: dict[str, object] = {"series": used, "seed": seed, "window_seconds": window,
                              "leads_hours": list(LEADS_HOURS), "alert_hours": ALERT_HOURS}
    for method, errs in errors.items():
        a = alerts[method]
        out[method] = {
            "median_relative_error": _median(errs),
            "p90_relative_error": _quantile(errs, 0.9),
            "within_25_percent": sum(1 for e in errs if e <= 0.25) / len(errs),
            "never_predicted": sum(1 for e in errs if math.isinf(e)) / len(errs),
            "median_relative_error_by_lead_hours": {k: _median(v) for k, v in by_lead[method].items()},
            "alert_recall": a["fired"] / a["should_fire"] if a["should_fire"] else None,
            "alert_false_alarm_rate": a["false_alarms"] / a["should_not_fire"] if a["should_not_fire"] else None,
        }
    return out


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    v = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return None if math.isinf(v) else round(v, 4)


def _median(values: list[float]) -> float | None:
    return _quantile(values, 0.5)
