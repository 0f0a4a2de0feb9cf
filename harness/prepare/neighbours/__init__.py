"""Neighbour databases: the test-suite semantics of "same rows" (README, "Neighbour databases").

A query that returns the gold's rows on the original database may still be wrong: ``SELECT 6``
for "how many singers" when the database holds six. Following Zhong, Yu and Klein (EMNLP 2020,
"Semantic Evaluation for Text-to-SQL with Distilled Test Suites"), the bundle also judges on a
few *neighbour* databases: the original's schema with other, fuzzed rows, kept only where they
tell a gold apart from queries that look like it. Built once, at data preparation:

* ``schema``: what a neighbour keeps of the original (schema, keys, what the data implies);
* ``values``: the values it is drawn from (the original's, the golds' literals, values near them);
* ``fuzz``: one neighbour database, seeded;
* ``variants``: the queries to tell each gold from (small edits of the gold);
* ``distil``: candidates built, evaluated, and a few kept by greedy choice;
* ``attach``: the kept files and the golds' results on them, into the bundle's data and index.
"""
