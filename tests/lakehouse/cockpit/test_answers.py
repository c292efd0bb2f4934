"""Shared answers: computed once for every reader, refreshed in the background, never waited for
while a recent one exists (stale-while-revalidate), with a clock the test moves by hand."""

from __future__ import annotations

import threading

import pytest

from lakehouse.cockpit.answers import SharedAnswers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counter:
    """A computation that counts its calls; optionally blocks until released."""

    def __init__(self, block: bool = False) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()
        if not block:
            self.release.set()

    def __call__(self) -> int:
        self.calls += 1
        self.started.set()
        assert self.release.wait(10), "never released"
        return self.calls


def settle(answers: SharedAnswers) -> None:
    for thread in answers.refreshes:
        thread.join(10)


def test_an_answer_is_computed_once_while_fresh() -> None:
    clock, compute = Clock(), Counter()
    answers = SharedAnswers(fresh=5, max_stale=60, clock=clock)
    assert [answers.get("k", compute) for _ in range(3)] == [1, 1, 1]
    clock.now += 5  # still fresh: no refresh
    assert answers.get("k", compute) == 1
    assert compute.calls == 1 and answers.refreshes == []


def test_a_stale_answer_is_served_at_once_and_refreshed_once_in_the_background() -> None:
    clock = Clock()
    answers = SharedAnswers(fresh=5, max_stale=60, clock=clock)
    assert answers.get("k", Counter()) == 1
    slow = Counter(block=True)
    slow.calls = 1
    clock.now += 6
    # the refresh blocks; every request meanwhile gets the old answer and starts no second refresh
    assert [answers.get("k", slow) for _ in range(5)] == [1, 1, 1, 1, 1]
    assert slow.started.wait(10)
    assert len(answers.refreshes) == 1
    slow.release.set()
    settle(answers)
    assert answers.get("k", slow) == 2  # the refreshed one, computed at "now": fresh again
    assert slow.calls == 2


def test_an_answer_older_than_max_stale_is_recomputed_before_answering() -> None:
    clock, compute = Clock(), Counter()
    answers = SharedAnswers(fresh=5, max_stale=60, clock=clock)
    assert answers.get("k", compute) == 1
    clock.now += 61
    assert answers.get("k", compute) == 2  # not the day-old figures
    assert answers.refreshes == []


def test_concurrent_first_requests_share_one_computation() -> None:
    answers = SharedAnswers(clock=Clock())
    compute = Counter(block=True)
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(answers.get("k", compute))) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert compute.started.wait(10)
    compute.release.set()
    for thread in threads:
        thread.join(10)
    assert got == [1, 1, 1, 1] and compute.calls == 1


def test_a_failed_refresh_keeps_the_previous_answer_and_a_failed_first_one_raises() -> None:
    clock = Clock()
    answers = SharedAnswers(fresh=5, max_stale=60, clock=clock)
    assert answers.get("k", lambda: "good") == "good"

    def broken() -> str:
        raise OSError("the ops table is being rewritten")

    clock.now += 10
    assert answers.get("k", broken) == "good"
    settle(answers)
    assert answers.get("k", broken) == "good"  # still within max_stale
    with pytest.raises(OSError, match="rewritten"):
        answers.get("other", broken)


def test_keys_are_separate_and_the_least_recently_asked_is_forgotten() -> None:
    answers = SharedAnswers(capacity=2, clock=Clock())
    assert answers.get(("pipeline", "iot", 1.0), lambda: "iot 1h") == "iot 1h"
    assert answers.get(("pipeline", "iot", 24.0), lambda: "iot 24h") == "iot 24h"
    assert answers.get(("pipeline", "iot", 1.0), lambda: "recomputed") == "iot 1h"
    assert answers.get(("pipeline", "ads", 1.0), lambda: "ads 1h") == "ads 1h"  # evicts iot 24h
    assert answers.get(("pipeline", "iot", 24.0), lambda: "recomputed") == "recomputed"
    assert answers.get(("pipeline", "iot", 1.0), lambda: "again") == "again"  # evicted by the line above
