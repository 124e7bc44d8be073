"""Short seeded nemesis runs (``nemesis.py``): the job through fault proxies to every neighbour
it has on each catalog, in append and upsert mode, and a routed topic of three tables whose
routing changes under the job while Backfills and a Repair run beside it
(``nemesis_routed.py``); the invariant holds after each."""

from __future__ import annotations

import pytest

from .nemesis import Plan, run

# Its schedule restarts the broker every test shares, and sets the fault proxies' toxics.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.faults,
    pytest.mark.alone("kafka"),
    pytest.mark.holds("toxiproxy"),
]

SECONDS = 30  # a run lasts until every kind of fault has happened once (about a minute)


# Each catalog, each mode (routed: an append table with routes); `make nemesis` runs every pair.
@pytest.mark.parametrize(
    "catalog,mode,seed",
    [("sqlite", "append", 11), ("postgresql", "upsert", 12), ("rest", "routed", 13)],
)
def test_the_invariant_holds_under_a_seeded_schedule_of_faults(
    stack, tmp_path, catalog, mode, seed
):
    outcome = run(stack, tmp_path, Plan(SECONDS, seed, catalog, mode))
    summary = outcome.summary()
    assert {
        "latency",
        "reset",
        "lost-reply",
        "refused",
        "down",
        "broker-restart",
        "kill",
        *(["reroute"] if mode == "routed" else []),
    } <= set(outcome.faults), summary
    assert outcome.produced > 0 and outcome.bad > 0, summary
    assert not outcome.violations, summary
