"""A harness command whose ``run`` fails with an error no check expects, as a bug would:
tests/test_vocabulary.py runs it to see that a bug is never reported as exit 1 ("checks failed")."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    raise RuntimeError("a bug in a command")
