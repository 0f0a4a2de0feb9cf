"""The flags several commands share, each with one meaning everywhere (docs/reference/cli.md).

* ``--data DIR``: the prepared folder, an input (``prepare --output`` wrote it; default ``out``);
* ``--output PATH``: what the command writes;
* ``--zip ZIP``: the bundle zip, an input (default ``DATA/spider-scoring.zip``, where ``pack`` writes it);
* ``--threads N``: threads in this process; ``--workers N`` (the service, grading) counts processes;
* ``--base-image IMAGE``: what the container images are built on;
* ``--json FILE``: also write the command's figures or report as JSON;
* ``--ray ADDRESS`` (``auto`` or ``HOST:PORT``), ``--ray-workers N``, ``--ray-shard-rows N``,
  ``--ray-stall-timeout SECONDS``: grade on Ray.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.common.errors import InputError
from harness.common.layout import DEFAULT_DATA, ZIP_NAME, Prepared
from harness.containers.trainer import DEFAULT_BASE_IMAGE, PUBLIC_BASE_IMAGE
from harness.raygrade.backend import RayOptions


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


def add_grade_workers(parser: argparse.ArgumentParser, prefix: str = "", where: str = "this process") -> None:
    parser.add_argument("--workers", type=int, metavar="N",
                        help=f"{prefix}worker processes grading the rows, each loading the bundle once; the results are "
                             f"the same for any N (default: every core {where} may use, at most one a 4 rows)")


def grade_workers_of(args: argparse.Namespace) -> int | None:
    """``--workers`` (None: the default, every usable core); InputError below 1 or beside ``--ray``."""
    if args.workers is None:
        return None
    if args.workers < 1:
        raise InputError(f"--workers {args.workers}: give 1 or more worker processes (1 grades in this process)")
    if getattr(args, "ray", None) is not None:
        raise InputError("--workers is for grading on this machine; with --ray, give --ray-workers N")
    return args.workers


def add_ray(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="grade on Ray: `auto` starts a local Ray instance for the run, HOST:PORT joins a running "
                             "cluster (needs the [ray] extra; docs/grading.md, Ray)")
    parser.add_argument("--ray-workers", type=int, metavar="N",
                        help="with --ray: worker processes, one CPU each (default: the CPUs Ray has)")
    parser.add_argument("--ray-shard-rows", type=int, metavar="N",
                        help="with --ray: rows a worker grades per call (default: the rows over 4 shards a worker, at most 64)")
    parser.add_argument("--ray-stall-timeout", type=float, metavar="SECONDS",
                        help="with --ray: stop with an error when no worker has been alive this long, all lost and "
                             f"none able to start (default: {RayOptions.stall_timeout_s:g})")


def ray_options_of(args: argparse.Namespace) -> RayOptions | None:
    """The Ray options given (None: the local backend); InputError for a Ray flag without ``--ray``."""
    if args.ray is None:
        if args.ray_workers is not None or args.ray_shard_rows is not None or args.ray_stall_timeout is not None:
            raise InputError("--ray-workers, --ray-shard-rows and --ray-stall-timeout go with --ray ADDRESS (e.g. --ray auto)")
        return None
    stall = RayOptions.stall_timeout_s if args.ray_stall_timeout is None else args.ray_stall_timeout
    return RayOptions(args.ray, args.ray_workers, args.ray_shard_rows, stall_timeout_s=stall).check()


def ray_line(figures: dict) -> str:
    """What a Ray run did, in one line."""
    retried = f", {figures['retried']} retried" if figures["retried"] else ""
    lost = f", {figures['given_up']} given up (rows unscored)" if figures["given_up"] else ""
    return (f"ray ({figures['address']}): {figures['workers']} workers in {figures['processes']} processes on "
            f"{len(figures['nodes'])} node(s), {figures['shards']} shards{retried}{lost}; start {figures['start_s']:.1f} s, "
            f"grading {figures['grade_s']:.1f} s")
