"""Kernel names of our IP sets, and which kernel sets we own.

Every desired set becomes one kernel set per IP version (the kernel's hash
sets hold one family each), plus a short-lived temporary set while it is
rewritten atomically::

    main   cali40<suffix>   cali60<suffix>     what rules reference (hash:ip)
           cali4n<suffix>   cali6n<suffix>     ... of a hash:net set
           cali4p<suffix>   cali6p<suffix>     ... of a hash:ip,port set
    temp   cali4t<suffix>   cali6t<suffix>     filled, swapped in, destroyed

The type is in the main name because the kernel cannot change a set's type
in place: ``swap`` refuses two types, and a set that rules reference can be
neither destroyed nor renamed. A set id whose type changes (or a restart
that finds the old type) therefore gets a new name, the rules are rendered
with it, and the old set is destroyed once no rule references it, as any
stale set is -- never a stuck destroy.

The suffix is the set id itself when it is short and made of characters the
``ipset`` tool and its restore format take verbatim; otherwise it is ``_``
followed by 24 characters of the URL-safe base64 of SHA-256(id). Direct
suffixes never start with ``_``, so a hashed name can never collide with a
direct one, and a set id always maps to the same name across restarts (a
restarted driver adopts the sets a previous run left).

We own exactly the kernel sets whose names start with one of the four
prefixes; everything else (kube-proxy's, an operator's) is never touched.
"""

from __future__ import annotations

import base64
import hashlib
import string

from dataplane.model import IPSetType

__all__ = ["MAX_NAME_LEN", "OWNED_PREFIXES", "is_owned", "main_name", "temp_name"]

MAX_NAME_LEN = 31  # IPSET_MAXNAMELEN - 1: the kernel's limit
_TYPE_LETTER = {IPSetType.IP: "0", IPSetType.NET: "n", IPSetType.IP_AND_PORT: "p"}
_TEMP_LETTER = "t"
OWNED_PREFIXES = tuple(
    f"cali{v}{letter}" for v in (4, 6) for letter in (*_TYPE_LETTER.values(), _TEMP_LETTER)
)
_SUFFIX_LEN = MAX_NAME_LEN - len("cali40")  # every prefix is 6 characters
# No whitespace (restore lines are split on it), no quotes, nothing a shell
# or the restore parser could read as syntax.
_SAFE = frozenset(string.ascii_letters + string.digits + ":._-+/=@")
_HASHED = "_"


def _suffix(set_id: str) -> str:
    if (
        0 < len(set_id) <= _SUFFIX_LEN
        and not set_id.startswith(_HASHED)
        and _SAFE.issuperset(set_id)
    ):
        return set_id
    digest = base64.urlsafe_b64encode(hashlib.sha256(set_id.encode()).digest()).decode()
    return _HASHED + digest[: _SUFFIX_LEN - len(_HASHED)]


def _check_version(version: int) -> None:
    if version not in (4, 6):
        raise ValueError(f"IP version must be 4 or 6, not {version!r}")


def main_name(set_id: str, version: int, kind: IPSetType = IPSetType.IP) -> str:
    """The kernel name rules reference for ``set_id``'s IPv``version`` members."""
    _check_version(version)
    return f"cali{version}{_TYPE_LETTER[kind]}{_suffix(set_id)}"


def temp_name(set_id: str, version: int) -> str:
    """The scratch set used to rewrite ``main_name(set_id, version)`` atomically."""
    _check_version(version)
    return f"cali{version}{_TEMP_LETTER}{_suffix(set_id)}"


def is_owned(name: str) -> bool:
    """True for kernel sets this driver created (and may therefore destroy)."""
    return name.startswith(OWNED_PREFIXES)
