"""A disputed gold's accepted answers: judged as golds of their own, on the same databases.

A gold that is wrong or narrower than its question (docs/disputed-golds.md) is not judged on the
original database only any more: that paid its constant (``SELECT 9.3`` for "the weight of the
youngest dog") and every near miss the original could not tell apart. The row carries its
accepted answers besides the dataset's gold (the recorded right answer, ``disputed_golds`` in the
index); an answer is paid when it matches one of them on the original, on the neighbours where
that one may be judged and under the searches, as any gold is judged. So a right answer to the
question is paid where the gold's mistake shows, and a constant matches none of them everywhere.

An accepted answer's result on each neighbour is computed once per process (it is not stored at
build time), and it is judged on a neighbour only where what it presupposes holds there
(``neighbours.proof.judges``, ``repeated_identity``); a neighbour relaxed for named golds judges
none of the accepted answers.
"""

from __future__ import annotations

from ..contract.limits import Limits
from ..neighbours import invariants as inv
from ..neighbours import proof as neighbour_proof
from ..sql import gold_results
from ..sql import guard as sql_guard
from ..sql import verdict as verify_mod
from . import index as bundle_index


def neighbours(data: bundle_index.BundleData, accepted: bundle_index.Resolved, original: gold_results.GoldResult,
               limits: Limits) -> tuple[verify_mod.Neighbour, ...]:
    """The neighbours of ``accepted``'s database on which that accepted answer may be judged, with
    its result on each (kept per process in the bundle's ``neighbour_cache``)."""
    if limits.semantics != "neighbours":
        return ()
    key = ("accepted", accepted.db_id, accepted.gold, limits.float_digits)
    found = data.neighbour_cache.get(key)
    if found is None:
        found = data.neighbour_cache[key] = _judged_on(data, accepted, original, limits)
    return found


def _judged_on(data: bundle_index.BundleData, accepted: bundle_index.Resolved, original: gold_results.GoldResult,
               limits: Limits) -> tuple[verify_mod.Neighbour, ...]:
    stored = data.invariants(accepted.db_id)
    profile = data.profile(accepted.db_id, stored) if stored is not None else None
    out = []
    for name, path, sha256, relaxed in data.neighbour_files(accepted.db_id):
        if relaxed:
            continue
        try:
            here, _cached = data.cache.get((sha256, accepted.gold, limits.float_digits),
                                           lambda: verify_mod.gold_result(accepted.gold, path, limits))  # noqa: B023
        except sql_guard.QueryFailed:
            continue  # it cannot run there: that neighbour cannot judge it
        if neighbour_proof.judges(original, here):
            continue
        if profile is not None:
            conn = inv.open_read_only(path)
            try:
                if neighbour_proof.repeated_identity(conn, profile, accepted.gold):
                    continue
            finally:
                conn.close()
        out.append(verify_mod.Neighbour(name, path, here))
    return tuple(out)


def original_result(data: bundle_index.BundleData, accepted: bundle_index.Resolved,
                    limits: Limits) -> gold_results.GoldResult:
    """The accepted answer's result on the original database (once per process). Raises
    sql_guard.QueryFailed where it fails: the bundle's list is then wrong, not the model."""
    found, _cached = data.cache.get((accepted.sha256, accepted.gold, limits.float_digits),
                                    lambda: verify_mod.gold_result(accepted.gold, accepted.path, limits))
    return found
