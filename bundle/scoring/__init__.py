"""The scoring entry: the bundle's data and rows (``index``), one call judged end to end (``entry``),
a batch of calls (``batch``) and rows whose gold is disputed (``disputed``)."""
