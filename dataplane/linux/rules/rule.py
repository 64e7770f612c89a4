"""One rule of the model, and where it came from."""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.linux.rules.action import Action
from dataplane.linux.rules.match import Match

__all__ = ["END_OF_TIER_RULE", "PROFILE_TIER", "Origin", "TableRule"]

# The tier of profiles, and of the final drop of what nothing allowed: no
# tier can be named so (Kubernetes names are lower case).
PROFILE_TIER = "__PROFILE__"
# The rule of a tier's end-of-tier drop (and of that final drop).
END_OF_TIER_RULE = "end-of-tier"


@dataclass(frozen=True, slots=True, order=True)
class Origin:
    """The policy rule (or tier end) a kernel rule was rendered from.

    What the policy counters label a rule's packets with and what a
    refusal report names, read from the rule itself -- never parsed back
    out of chain names or comments.

    Attributes:
        tier: the policy's tier; profiles and the final drop of what no
            policy or profile allowed have ``PROFILE_TIER``.
        policy: the policy's key (as text) or profile id; "" for a tier's end.
        direction: "inbound" or "outbound".
        rule: the rule's index in the message, or ``END_OF_TIER_RULE``.
        action: allow, deny, pass or log.
    """

    tier: str
    policy: str
    direction: str
    rule: str
    action: str


@dataclass(frozen=True, slots=True)
class TableRule:
    """Every ``match`` term holds: do ``action`` (None: only count the packet).

    Attributes:
        comment: for people reading the ruleset; labels only.
        origin: the policy rule this was rendered from, if any.
        counts: this rule's packet counter counts exactly the packets
            ``origin`` matched (the rule that carries its verdict, not the
            helpers before it or a RETURN after it).
    """

    match: tuple[Match, ...] = ()
    action: Action | None = None
    comment: str = ""
    origin: Origin | None = None
    counts: bool = False
