"""Neighbour databases: the test-suite semantics of "same rows" (docs/neighbours.md).

A query that returns the gold's rows on the original database may still be wrong: ``SELECT 6``
for "how many singers" when the database holds six. Following Zhong, Yu and Klein (EMNLP 2020,
"Semantic Evaluation for Text-to-SQL with Distilled Test Suites"), the bundle also judges on a
few *neighbour* databases: the original's schema with other rows that keep every invariant of its
data, kept only where they tell a gold apart from queries that look like it. The generator lives
in the bundle (``bundle/neighbour_*.py``: the grader's counterexample search uses it too); here,
at data preparation:

* ``variants``: the queries to tell each gold from (small edits of the gold);
* ``distil``: candidates built, evaluated, and a few kept by greedy choice;
* ``questions`` and ``relax``: where a kept invariant hides a gold's question (every room booked,
  for "the rooms without a reservation"), a neighbour that relaxes that invariant, for that gold;
* ``attach``: the kept files, proved, with the golds' results on them and the invariants, into
  the bundle's data and index.
"""
