"""`serve`: the bundle's grader as an HTTP service (`http:URL` graders), on 127.0.0.1.

    python3 -m harness serve [--zip out/spider-scoring.zip] [--port 8000] [--local] [--workers N ...]

By default the service runs in its locked-down container (harness.containers.service): built
once per input change, the zip mounted read-only, port 8000 published on 127.0.0.1:PORT. The
container's JSON log is shown until Ctrl-C or SIGTERM, which stop it gracefully (in-flight
requests finish) and remove it. ``--local`` runs the same server in this process, without
Docker. Point a trainer's evaluation at ``http:http://127.0.0.1:PORT/grade``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands import options
from harness.common.layout import DEFAULT_DATA, Prepared, require
from harness.containers.service import ServiceContainer
from harness.containers.trainer import follow_logs, interrupt_on_signals
from harness.service import server, settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zip", type=Path, default=Prepared(DEFAULT_DATA).zip, metavar="ZIP",
                        help="the bundle zip to serve (default: out/spider-scoring.zip)")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default: 8000; 0: any free port)")
    parser.add_argument("--local", action="store_true", help="run the server in this process, not in Docker")
    options.add_base_image(parser)
    settings.add_arguments(parser)


def _serve_docker(args: argparse.Namespace, chosen: settings.ServiceSettings) -> int:
    container = ServiceContainer(args.zip, chosen, base_image=options.base_image_of(args), host_port=args.port)
    with interrupt_on_signals():  # SIGTERM stops it like Ctrl-C
        try:
            with container:
                print(f"grader service ready at {container.url}/grade (container {container.name}); "
                      "Ctrl-C stops it", flush=True)
                follow_logs(container.container, lambda chunk: print(chunk.decode("utf-8", "replace"), end="", flush=True))
        except KeyboardInterrupt:
            print("grader service stopped (requests in flight were let finish) and its container removed",
                  flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    chosen = settings.from_args(args)
    require(args.zip, "the bundle zip")
    if args.local:
        argv = ["--zip", str(args.zip), "--bind", f"127.0.0.1:{args.port}", *settings.to_argv(chosen)]
        return server.main(argv)
    return _serve_docker(args, chosen)
