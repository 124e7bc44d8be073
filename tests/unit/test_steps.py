"""The driver's time in a batch by step: each step's own time, the inner ones apart."""

from __future__ import annotations

import threading

from floe_sparkapp import steps


def test_a_step_inside_another_counts_apart_and_each_batch_starts_anew(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 3.5, 3.5, 10.0, 10.0, 10.25])
    monkeypatch.setattr(steps.time, "monotonic", lambda: next(clock))
    steps.taken()
    with steps.step("write"):  # noqa: SIM117 - the nesting is the test. 0.0
        with steps.step("load"):  # 1.0 .. 3.0
            pass
    with steps.step("commit"):  # 3.5 (write ended at 3.5: 1.0 + 0.5 of its own)
        pass  # .. 10.0
    with steps.step("write"):  # 10.0 .. 10.25
        pass
    assert steps.taken() == {"commit": 6.5, "write": 1.75, "load": 2.0}
    assert steps.taken() == {}


def test_each_thread_counts_its_own_steps():
    steps.taken()
    seen = {}

    def other():
        with steps.step("elsewhere"):
            pass
        seen.update(steps.taken())

    with steps.step("here"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert set(steps.taken()) == {"here"} and set(seen) == {"elsewhere"}
