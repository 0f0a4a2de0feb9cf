"""Spider execution-match scoring bundle.

The trainer imports this folder, unpacked from the zip, as a package: ``reward`` for every GRPO
rollout and ``grader`` for every evaluation example. Standard library only (CPython 3.9+).
"""
