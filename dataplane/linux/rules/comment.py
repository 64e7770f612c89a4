"""Comments on rules: labels for people, never trusted text."""

from __future__ import annotations

import re

__all__ = ["safe_comment"]

# What a label comment may hold. Comments carry names from messages (tier
# names), which only label, so anything outside this alphabet becomes "_":
# no quote, backslash, newline or NUL can end the comment, the line or the
# restore input, whatever a message says.
_COMMENT_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/=@+-]")
_COMMENT_MAX = 200  # the kernel takes 255 bytes; leave room for the quotes


def safe_comment(text: str) -> str:
    """``text`` reduced to the label alphabet and length (pure, idempotent)."""
    return _COMMENT_UNSAFE.sub("_", text[:_COMMENT_MAX])
