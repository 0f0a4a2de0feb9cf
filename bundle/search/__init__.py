"""The searches for a counterexample, run when an answer matches its gold everywhere else: more
databases drawn for the pair (``counterexample``), the original edited where the two differ
(``difference``), and where their databases are kept (in memory, on disk, in a private folder)."""
