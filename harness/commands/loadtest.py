"""`loadtest`: a bounded load test of the grader service, from this process, over loopback.

    python3 -m harness loadtest [--url URL | --zip out/spider-scoring.zip [--docker]]
        [--data out] [--requests 5000] [--threads 32] [--runaway-every 100]

Without ``--url`` the server is started for the test (a local process, or the container with
``--docker``) and stopped afterwards; harness.loadtest.run sends the two phases and judges them.
Exits 1 when the run fails (a failed request, a lost or different answer, a worker that grew).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from harness.commands import options
from harness.common.errors import CHECKS_FAILED, InputError
from harness.common.files import atomic_write_bytes
from harness.common.layout import Prepared, require
from harness.containers.service import ServiceContainer
from harness.loadtest.local_server import LocalServer
from harness.loadtest.run import problems_of, render, run_load
from harness.service.settings import ServiceSettings, default_workers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="an already running service (default: start one from --zip for the test)")
    options.add_data(parser)
    options.add_zip(parser, "the bundle zip to serve")
    parser.add_argument("--docker", action="store_true", help="start the service in its container, not as a local process")
    options.add_base_image(parser)
    parser.add_argument("--requests", type=int, default=5000, metavar="N", help="requests per phase (default: 5000)")
    options.add_threads(parser, "client threads sending requests", default=32)
    parser.add_argument("--runaway-every", type=int, default=100, metavar="N",
                        help="second phase: a runaway query every N requests; 0 skips that phase (default: 100)")
    parser.add_argument("--max-rows", type=int, metavar="N", help="use only the first N eval rows")
    parser.add_argument("--sample-every", type=float, default=1.0, metavar="S",
                        help="seconds between RSS samples (default: 1)")
    parser.add_argument("--max-growth-mib", type=float, default=16.0, metavar="MIB",
                        help="fail when a worker's RSS grows more than this during a phase (default: 16)")
    options.add_json(parser, "the figures")
    parser.add_argument("--workers", type=int, default=default_workers(), metavar="PROCESSES",
                        help="worker processes of the server started for the test (default: the service's, 8 per core)")


def _server(args: argparse.Namespace) -> Any:
    """The server to test: a context manager with a ``url`` (none to start with ``--url``)."""
    if args.url:
        return contextlib.nullcontext(argparse.Namespace(url=args.url))
    zip_path = require(options.zip_of(args), "the bundle zip")
    chosen = ServiceSettings(workers=args.workers)
    if args.docker:
        return ServiceContainer(zip_path, chosen, base_image=options.base_image_of(args))
    return LocalServer(zip_path, chosen)


def run(args: argparse.Namespace) -> int:
    if args.requests <= 0 or args.threads <= 0 or args.runaway_every < 0:
        raise InputError("--requests and --threads must be positive, --runaway-every 0 or more")
    eval_path = require(Prepared(args.data).split("eval"), "the eval split")
    with _server(args) as server:
        report = run_load(server.url, eval_path, requests=args.requests, threads=args.threads,
                          runaway_every=args.runaway_every, max_rows=args.max_rows, sample_every=args.sample_every)
    print(render(report, args.max_growth_mib))
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(report, indent=2) + "\n").encode("utf-8"))
    return CHECKS_FAILED if problems_of(report, args.max_growth_mib) else 0
