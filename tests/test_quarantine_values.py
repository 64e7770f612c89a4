"""The quarantine's bookkeeping values, on their own (no programmer, no I/O)."""

from __future__ import annotations

from dataplane.core.quarantine import Quarantine, Unsaid


def test_a_failure_is_said_once_per_spell_and_again_for_a_new_reason() -> None:
    unsaid: Unsaid[str] = Unsaid()
    assert unsaid.news({"cali1": "EPERM"}) == [("cali1", "EPERM")]
    assert unsaid.news({"cali1": "EPERM"}) == []  # still failing: not news
    assert unsaid.news({"cali1": "ENOENT", "cali2": "EPERM"}) == [
        ("cali1", "ENOENT"),
        ("cali2", "EPERM"),
    ]
    assert unsaid.news({}) == []  # recovered: nothing to say
    assert unsaid.news({"cali1": "ENOENT"}) == [("cali1", "ENOENT")]  # failing again


def test_held_objects_back_off_alone_and_a_new_value_gets_a_fresh_chance() -> None:
    now = [0.0]
    held: Quarantine[str] = Quarantine(lambda: now[0])
    assert held.reject("a", "refused")
    assert held.reasons() == {"a": "refused"} and held.due() == []
    now[0] = held.next_retry()
    assert held.due() == ["a"]
    assert held.release("a") and "a" not in held
