"""Neighbour databases at grading time: what a database keeps (its invariants), the values a query
names, the rows drawn and linked, and the proof that a neighbour keeps what its original keeps."""
