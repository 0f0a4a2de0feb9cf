"""Several completions a row: pass@k and majority@k of a stage graded with n samples a row.

``grade`` keeps every sample of such a stage in ``STAGE.samples.jsonl`` (harness.common.results);
from it, for k = 1, 2, 4, ... and n:

* **pass@k**: the chance that at least one of k samples drawn from a row's n is right, by the
  unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on Code"):
  ``1 - C(n - c, k) / C(n, k)`` for a row with c right of n, averaged over the rows;
* **majority@k**: the answer most of a row's first k samples give (self-consistency): the samples
  are grouped by their rows on the original database (``answer``, the bundle's key of the result
  as a bag of rows), a sample whose query did not run never wins a vote, the largest group wins
  and a tie goes to the group whose first sample comes first; the row's verdict is that first
  sample's. A row none of whose k samples ran scores 0.

A row with an unscored sample (a gold or infrastructure error) is left out of both, and counted.

>>> pass_at_k(5, 2, 1), round(pass_at_k(5, 2, 2), 4), pass_at_k(5, 0, 3), pass_at_k(5, 4, 2)
(0.4, 0.7, 0.0, 1.0)
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence

from harness.common.results import RowResult

CAPTION = ("pass@k: the chance that one of k samples of a row's n is right (the unbiased estimator, averaged over "
           "rows); majority@k: the verdict of the answer most of a row's first k samples give (grouped by their rows "
           "on the original database). The stage's accuracy above is each row's first sample: put the greedy "
           "completion first, or grade a greedy stage beside it.")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one row: c right among n samples."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_at_k(samples: Sequence[RowResult], k: int) -> float:
    """The verdict of the answer most of the first ``k`` samples (in sample order) give."""
    votes: dict[str, list[RowResult]] = collections.defaultdict(list)
    for sample in sorted(samples, key=lambda r: r.sample)[:k]:
        if sample.answer is not None:
            votes[sample.answer].append(sample)
    if not votes:
        return 0.0
    # dicts keep insertion order: among the largest groups, the one whose first sample came first
    winner = max(votes.values(), key=len)
    return float(winner[0].score or 0.0)


def ks(n: int) -> list[int]:
    """The k shown for n samples: 1, 2, 4, ... below n, then n.

    >>> ks(1), ks(5), ks(8)
    ([1], [1, 2, 4, 5], [1, 2, 4, 8])
    """
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


@dataclasses.dataclass(frozen=True)
class Sampled:
    """A sampled stage's figures: n samples a row, the rows counted and left out, and per k."""

    n: int
    rows: int
    left_out: int  # rows with an unscored sample
    first: float | None  # the accuracy of each row's first sample (what STAGE.jsonl holds)
    pass_at: tuple[tuple[int, float], ...]
    majority_at: tuple[tuple[int, float], ...]


def figures(results: Sequence[RowResult]) -> Sampled:
    """pass@k and majority@k of the samples in ``results`` (a samples file: every row n times)."""
    by_row: dict[str, list[RowResult]] = collections.defaultdict(list)
    for r in results:
        by_row[r.row_id].append(r)
    n = max((len(v) for v in by_row.values()), default=0)
    whole = [v for v in by_row.values() if all(s.scored for s in v)]
    if not whole:
        return Sampled(n, 0, len(by_row), None, (), ())
    counts = [sum(1 for s in v if s.score == 1.0) for v in whole]
    firsts = [min(v, key=lambda s: s.sample).score == 1.0 for v in whole]
    return Sampled(
        n, len(whole), len(by_row) - len(whole), sum(firsts) / len(whole),
        tuple((k, sum(pass_at_k(len(v), c, k) for v, c in zip(whole, counts)) / len(whole)) for k in ks(n)),
        tuple((k, sum(majority_at_k(v, k) for v in whole) / len(whole)) for k in ks(n)))


def summary_line(f: Sampled) -> str:
    if not f.rows:
        return f"{f.n} samples a row: every row has an unscored sample; no pass@k"
    left = f" ({f.left_out} rows with an unscored sample left out)" if f.left_out else ""
    return (f"{f.n} samples a row over {f.rows} rows{left}: "
            + ", ".join(f"pass@{k} {v:.3f}" for k, v in f.pass_at) + "; "
            + ", ".join(f"majority@{k} {v:.3f}" for k, v in f.majority_at))


def comparable_line(scored: Sequence[RowResult]) -> str:
    """``, Spider's official rule X, BIRD's Y`` over the scored rows graded with both, or nothing."""
    parts = []
    for name, field in (("Spider's official rule", "official_score"), ("BIRD's rule", "bird_score")):
        values = [getattr(r, field) for r in scored if getattr(r, field) is not None]
        if values:
            parts.append(f"{name} {sum(values) / len(values):.3f}")
    return f"; {', '.join(parts)} on the original database" if parts else ""
