"""The flags several commands share, each with one meaning everywhere (docs/reference/cli.md).

* ``--data DIR``: the prepared folder, an input (``prepare --output`` wrote it; default ``out``);
* ``--output PATH``: what the command writes;
* ``--zip ZIP``: the bundle zip, an input (default ``DATA/spider-scoring.zip``, where ``pack`` writes it);
* ``--threads N``: threads in this process; ``--workers N`` (the service) counts processes;
* ``--base-image IMAGE``: what the container images are built on;
* ``--json FILE``: also write the command's figures or report as JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.common.layout import DEFAULT_DATA, ZIP_NAME, Prepared
from harness.containers.trainer import DEFAULT_BASE_IMAGE, PUBLIC_BASE_IMAGE


def add_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, metavar="DIR",
                        help="the prepared folder: splits in DIR/data/, staged bundle in DIR/bundle/ (default: out)")


def add_zip(parser: argparse.ArgumentParser, what: str = "the bundle zip") -> None:
    parser.add_argument("--zip", type=Path, metavar="ZIP", help=f"{what} (default: DATA/{ZIP_NAME})")


def zip_of(args: argparse.Namespace) -> Path:
    """``--zip``, else the zip of the prepared folder ``--data`` (default ``out``)."""
    return args.zip or Prepared(getattr(args, "data", DEFAULT_DATA)).zip


def add_output(parser: argparse.ArgumentParser, what: str, metavar: str = "FILE") -> None:
    parser.add_argument("--output", type=Path, metavar=metavar, help=what)


def add_threads(parser: argparse.ArgumentParser, what: str, default: int = 8) -> None:
    parser.add_argument("--threads", type=int, default=default, metavar="N", help=f"{what} (default: {default})")


def add_base_image(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-image", metavar="IMAGE",
                        help=f"image the containers are built on (default: $BASE_IMAGE, else {PUBLIC_BASE_IMAGE})")


def base_image_of(args: argparse.Namespace) -> str:
    return args.base_image or DEFAULT_BASE_IMAGE


def add_container_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                        help="stop the container after S seconds (default: 3600)")


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", type=Path, metavar="FILE", help=f"also write {what} as JSON to FILE")


def add_token_file(parser: argparse.ArgumentParser, what: str) -> None:
    """``--token-file FILE``: the file holding the grader service's token (never the token itself:
    an argument shows in ``ps``); without it, ``$SPIDER_GRADER_TOKEN``."""
    parser.add_argument("--token-file", type=Path, metavar="FILE",
                        help=f"file holding the grader service's token (default: $SPIDER_GRADER_TOKEN); {what}")
