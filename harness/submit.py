"""`submit`: placeholder while the module is being written."""
from __future__ import annotations

import argparse

from harness.errors import SubmitError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SubmitError("submit is not implemented yet")
