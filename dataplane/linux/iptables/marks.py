"""Mark matches and mark-setting targets in iptables syntax."""

from __future__ import annotations

__all__ = ["clear_mark", "has_mark", "lacks_mark", "set_mark"]


def set_mark(bit: int) -> str:
    return f"-j MARK --set-xmark {bit:#x}/{bit:#x}"


def clear_mark(bits: int) -> str:
    return f"-j MARK --set-xmark 0x0/{bits:#x}"


def has_mark(bit: int) -> str:
    return f"-m mark --mark {bit:#x}/{bit:#x}"


def lacks_mark(bit: int) -> str:
    return f"-m mark --mark 0x0/{bit:#x}"
