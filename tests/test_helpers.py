"""The tests' own helpers (tests/helpers.py): a wait honours the timeout it is given."""

from __future__ import annotations

import pytest

from tests import helpers
from tests.helpers import wait_for


class FakeClock:
    """``time.monotonic`` and ``time.sleep`` for helpers: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(helpers.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(helpers.time, "sleep", fake.sleep)
    return fake


def test_a_wait_fails_at_its_own_timeout_naming_what_it_waited_for(clock: FakeClock) -> None:
    with pytest.raises(AssertionError, match=r"timed out after 2 s waiting for the run to end"):
        wait_for(lambda: False, 2, "the run to end")
    assert 2 <= clock.now - 1000.0 <= 2.1  # no floor: 2 s is 2 s, not minutes


def test_a_wait_returns_the_value_as_soon_as_it_holds(clock: FakeClock) -> None:
    polls: list[float] = []

    def ready() -> str:
        polls.append(clock.now)
        return "done" if len(polls) == 3 else ""

    assert wait_for(ready, 60, "three polls") == "done"
    assert len(polls) == 3 and clock.now - 1000.0 < 1
