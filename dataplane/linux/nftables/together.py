"""Our tables of both families in one ``nft -f``, fed while the IP sets are written.

Each ``nft`` run fetches the whole ruleset of the namespace before it
writes, whichever table it writes (tens of ms on a loaded node): one run
for both families costs one fetch, not two. The tables' changes go in as
one transaction; if nft refuses it, each table is applied on its own,
which finds the chain to blame.

nft parses a script as it reads it, and looks at the kernel only once its
input has ended (it fetches the ruleset, evaluates every command, and
commits). So the script is fed to it as each table's is made
(:func:`~dataplane.linux.kernel.fed.feeding`; every table's head as it is
made, the tails once all are: :class:`~.table.NftScript`), and the IP
sets the rules look up are written (``meanwhile``) before the input ends:
on a node of 1,000 endpoints nft's 0.9 s of parsing runs beside the
driver making the script and writing 100,000 set members, where it used
to follow them. Were an nft to look a set up before its input ended, it
would refuse the transaction, and each table would be applied again on
its own, after the sets: slower, never wrong.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence

from dataplane.linux.kernel.fed import Fed, feeding
from dataplane.linux.kernel.side_by_side import side_by_side
from dataplane.linux.nftables.table import NftTable, script_text

__all__ = ["apply_together"]

# A path, not "-": nft reads all of stdin into memory before it parses
# (for its error messages), and a file as it parses.
FED_SCRIPT = ("nft", "-f", "/proc/self/fd/0")


async def _nothing() -> None:
    return None


async def apply_together(
    tables: Sequence[NftTable],
    meanwhile: Callable[[], Awaitable[None]] = _nothing,
    beside: Callable[[], Awaitable[None]] | None = None,
) -> bool:
    """Apply the tables (one per family) with one ``nft -f``; True if anything
    was written. ``meanwhile`` runs once, after the scripts are made and
    before nft has read their end (also when there is nothing to write).
    ``beside`` runs while nft commits, if it runs (reads for the steps
    after; it must not raise what the kernel says: see its caller).

    Raises:
        ProgrammingError: as :meth:`NftTable.apply`, or from ``meanwhile``:
            nft is then killed before its input ends, and nothing of the
            script is written.
    """

    async def joint() -> bool:
        # Read (where they must be) side by side: reads, no run starts over.
        begun: dict[NftTable, tuple[dict[str, list[str | None]], set[str]]] = {}

        async def begin(table: NftTable) -> None:
            begun[table] = await table.begin()

        await side_by_side(*(functools.partial(begin, t) for t in tables))
        plans = []
        tails: list[bytes] = []
        fed: Fed | None = None
        async with contextlib.AsyncExitStack() as stack:
            for table in tables:
                script, written = table.script(*begun[table])
                plans.append((table, written, begun[table][1]))
                if not script:
                    continue
                if fed is None:  # nft starts on the first line there is
                    fed = await stack.enter_async_context(feeding(table.runner, FED_SCRIPT))
                # Every table's head before any tail: there the anonymous
                # sets are bound, and each bind walks the transaction so
                # far (the ip table's 37,000 rules, for the ip6 table's
                # sets on a 1,000-endpoint node: ~0.3 s of its commit).
                fed.send(script_text(script.head))
                tails.append(script_text(script.tail))
            for tail in tails:
                assert fed is not None  # a tail is kept only once nft runs
                fed.send(tail)
            await meanwhile()
            # Out of this block, which kills nft unfed if anything above raises.
            running = stack.pop_all()
        if fed is None:
            wrote = False
            for table in tables:
                table.settle()
                wrote |= await table.apply_data()
            return wrote
        # nft has its whole input once this ends it: it evaluates and
        # commits (seconds on a loaded node's first apply) beside this.
        await side_by_side(running.aclose, *(() if beside is None else (beside,)))
        assert fed.result is not None  # set when the block ends without raising
        if fed.result.returncode != 0:
            # Nothing of it was applied: each on its own, to blame one chain.
            wrote = False
            for table in tables:
                wrote |= await table.apply_alone()
            return wrote
        for table, written, trial in plans:
            table.wrote(written, trial)
        for table in tables:
            await table.apply_data()
        return True

    # A refresh read that comes back meanwhile waits for the end, for each.
    apply = joint
    for table in tables:
        apply = functools.partial(table.while_applying, apply)
    return await apply()
