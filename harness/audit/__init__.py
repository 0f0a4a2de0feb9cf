"""The audit of degenerate answers: which rows a reward pays for an answer that is not the query
(docs/audit.md). Host side: its edits of the golds use sqlparse; it scores through a bundle zip
loaded as the trainer loads it."""
