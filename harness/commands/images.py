"""`image`, `service-image`, `proxy-image`: build (once per input change) the trainer's, the grader
service's or its proxy's image.

    python3 -m harness image [--base-image IMAGE]
    python3 -m harness service-image [--base-image IMAGE]
    python3 -m harness proxy-image [--base-image IMAGE]

Both print the image's tag (a hash of its inputs) and size.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from harness.commands import options
from harness.containers import proxy, service, trainer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_base_image(parser)


def show_image(ensure: Callable[[Any, str], str], base_image: str) -> int:
    """``ensure(client, base_image)`` builds the image when needed; print its tag and size."""
    client = trainer.connect()
    tag = ensure(client, base_image)
    size = client.images.get(tag).attrs.get("Size", 0)
    print(f"image {tag}  ({size / 1e6:.0f} MB, on {base_image})")
    return 0


def run(args: argparse.Namespace) -> int:
    ensure = {"service-image": service.ensure_image, "proxy-image": proxy.ensure_image}.get(args.command, trainer.ensure_image)
    return show_image(ensure, options.base_image_of(args))
