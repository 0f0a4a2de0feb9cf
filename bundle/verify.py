"""verify(): a completion, a gold query and a database in, a Verdict out. The public building block.

The judgement itself lives in ``sql/verdict.py`` (outcomes, the Verdict, judging on one database and
on neighbours); this file is its face at the bundle's root, where a user or a trainer finds it, and
works imported as part of the bundle's package or loaded as a file with no parent package (the
bundle's folder on ``sys.path``): then ``bundle_package`` imports the folder as a private package.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript("CREATE TABLE t(a); INSERT INTO t VALUES (1), (2);")
>>> verify("```sql\\nSELECT a FROM t ORDER BY a DESC\\n```", "SELECT a FROM t", path).outcome
'match'
"""

from __future__ import annotations

try:
    from .sql import verdict as _verdict
except ImportError:  # loaded as a file with no parent package
    import importlib.util as _util
    import os as _os

    _spec = _util.spec_from_file_location("_spider_scoring_bundle_package",
                                          _os.path.join(_os.path.dirname(_os.path.realpath(__file__)), "bundle_package.py"))
    _loader = _util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_loader)  # type: ignore[union-attr]
    _verdict = _loader.sibling(__file__, "sql.verdict")

MATCH = _verdict.MATCH
MISMATCH = _verdict.MISMATCH
NO_QUERY = _verdict.NO_QUERY
PREDICTION_ERROR = _verdict.PREDICTION_ERROR
FORBIDDEN = _verdict.FORBIDDEN
PREDICTION_OVER_BUDGET = _verdict.PREDICTION_OVER_BUDGET
PREDICTION_OVER_CAP = _verdict.PREDICTION_OVER_CAP
GOLD_ERROR = _verdict.GOLD_ERROR
INFRASTRUCTURE_ERROR = _verdict.INFRASTRUCTURE_ERROR
INFRASTRUCTURE_TIMEOUT = _verdict.INFRASTRUCTURE_TIMEOUT
OUTCOMES = _verdict.OUTCOMES
UNSCORED = _verdict.UNSCORED
SQLITE_VERSION = _verdict.SQLITE_VERSION
DISPUTED_MARK = _verdict.DISPUTED_MARK
DISPUTED_PREFIX = _verdict.DISPUTED_PREFIX
DEFAULT_LIMITS = _verdict.DEFAULT_LIMITS
Limits = _verdict.Limits

Verdict = _verdict.Verdict
Neighbour = _verdict.Neighbour
Disputed = _verdict.Disputed
Searched = _verdict.Searched
Judged = _verdict.Judged

verify = _verdict.verify
judge = _verdict.judge
gold_result = _verdict.gold_result
gold_shape = _verdict.gold_shape
disputed_id = _verdict.disputed_id
decided_place = _verdict.decided_place
decided_on_original = _verdict.decided_on_original
outcome_counts = _verdict.outcome_counts
reset_outcome_counts = _verdict.reset_outcome_counts
