"""`loadtest`: a bounded load test of the grader service, from this process, over loopback.

    python3 -m harness loadtest [--url URL [--token-file FILE] | --zip out/spider-scoring.zip [--docker | --via-proxy]]
        [--data out] [--requests 5000] [--threads 32] [--runaway-every 100]

Without ``--url`` the server is started for the test (a local process, the container with
``--docker``, or the container behind its proxy over HTTPS with ``--via-proxy``) and stopped
afterwards; harness.loadtest.run sends the two phases and judges them. Requests carry the token
in the path, as a trainer's URL does. Exits 1 when the run fails (a failed request, a lost or
different answer, a worker that grew).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from harness.commands import options
from harness.common import tokens
from harness.common.errors import CHECKS_FAILED, InputError
from harness.common.files import atomic_write_bytes, check_writable_file
from harness.common.http_client import Endpoint
from harness.common.layout import Prepared, require
from harness.containers.public import PublicService
from harness.containers.service import ServiceContainer
from harness.loadtest.local_server import LocalServer
from harness.loadtest.run import problems_of, render, run_load
from harness.service.settings import ServiceSettings, default_workers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="an already running service, http://HOST:PORT or https://HOST:PORT (default: start "
                                      "one from --zip for the test)")
    options.add_token_file(parser, "needed with --url")
    parser.add_argument("--ca-file", metavar="FILE",
                        help="with an https --url: the certificate (PEM) to trust, e.g. a self-signed one (default: the system's)")
    options.add_data(parser)
    options.add_zip(parser, "the bundle zip to serve")
    parser.add_argument("--docker", action="store_true", help="start the service in its container, not as a local process")
    parser.add_argument("--via-proxy", action="store_true",
                        help="start the service in its container behind its proxy and send every request through it over HTTPS")
    options.add_base_image(parser)
    parser.add_argument("--requests", type=int, default=5000, metavar="N", help="requests per phase (default: 5000)")
    options.add_threads(parser, "client threads sending requests", default=32)
    parser.add_argument("--runaway-every", type=int, default=100, metavar="N",
                        help="second phase: a runaway query every N requests; 0 skips that phase (default: 100)")
    parser.add_argument("--max-rows", type=int, metavar="N", help="use only the first N eval rows")
    parser.add_argument("--route", choices=("grade", "verify", "ors"), default="grade",
                        help="the endpoint loaded: the grader's /grade (default), NeMo Gym's /verify, or an Open Reward "
                             "Standard episode a request (session, task, submit; the server gets the eval split), every "
                             "answer checked against the one it gets alone")
    parser.add_argument("--sample-every", type=float, default=1.0, metavar="S",
                        help="seconds between RSS samples (default: 1)")
    parser.add_argument("--max-growth-mib", type=float, default=16.0, metavar="MIB",
                        help="fail when a worker's RSS grows more than this during a phase (default: 16)")
    options.add_json(parser, "the figures")
    parser.add_argument("--workers", type=int, default=default_workers(), metavar="PROCESSES",
                        help="worker processes of the server started for the test (default: the service's, 8 per core)")


def _server(args: argparse.Namespace) -> Any:
    """The server to test: a context manager (none to start with ``--url``)."""
    if args.url:
        token, _source = tokens.from_sources(args.token_file)
        if token is None:
            raise InputError(f"--url needs the service's token: --token-file FILE or ${tokens.ENV}")
        return contextlib.nullcontext(Endpoint.from_url(args.url, token=token, cafile=args.ca_file))
    zip_path = require(options.zip_of(args), "the bundle zip")
    chosen = ServiceSettings(workers=args.workers)
    tasks = Prepared(args.data).split("eval").parent if args.route == "ors" else None  # the ORS environment's splits
    if args.via_proxy:
        return PublicService(zip_path, chosen, token=tokens.generate(), base_image=options.base_image_of(args), tasks=tasks)
    if args.docker:
        return ServiceContainer(zip_path, chosen, base_image=options.base_image_of(args), tasks=tasks)
    return LocalServer(zip_path, chosen, tasks=tasks)


def endpoint_of(server: Any) -> Endpoint:
    """Where the load goes: the token in the path, over HTTPS through the proxy."""
    if isinstance(server, Endpoint):
        return server
    if isinstance(server, PublicService):
        return server.endpoint()
    return Endpoint.from_url(server.url, token=server.token)


def run(args: argparse.Namespace) -> int:
    if args.requests <= 0 or args.threads <= 0 or args.runaway_every < 0:
        raise InputError("--requests and --threads must be positive, --runaway-every 0 or more")
    if sum(map(bool, (args.url, args.docker, args.via_proxy))) > 1:
        raise InputError("give one of --url, --docker and --via-proxy")
    eval_path = require(Prepared(args.data).split("eval"), "the eval split")
    if args.json:
        check_writable_file(args.json, "the report")
    with _server(args) as server:
        report = run_load(endpoint_of(server), eval_path, requests=args.requests, threads=args.threads,
                          runaway_every=args.runaway_every, max_rows=args.max_rows, sample_every=args.sample_every,
                          route=args.route)
    print(render(report, args.max_growth_mib))
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(report, indent=2) + "\n").encode("utf-8"))
    return CHECKS_FAILED if problems_of(report, args.max_growth_mib) else 0
