"""The hardened SQL executor and comparator: a query read, guarded, run under counted work, its rows
compared with the gold's, and the verdict on one database (``verdict``)."""
