"""`serve`: the bundle's grader as an HTTP service (`http:URL` graders), on 127.0.0.1.

    python3 -m harness serve [--zip dist/spider-scoring.zip] [--port 8000] [--local] [--workers N ...]

By default the service runs in its locked-down container (``harness.service_docker``): built
once per input change, the zip mounted read-only, port 8000 published on 127.0.0.1:PORT. The
container's JSON log is shown until Ctrl-C or SIGTERM, which stop it gracefully (in-flight
requests finish) and remove it. ``--local`` runs the same server in this process, without
Docker. Point a trainer's evaluation at ``http:http://127.0.0.1:PORT/grade``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import service_settings
from harness.names import BUNDLE_ZIP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zip", type=Path, default=BUNDLE_ZIP, help=f"the bundle zip to serve (default: {BUNDLE_ZIP})")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default: 8000; 0: any free port)")
    parser.add_argument("--local", action="store_true", help="run the server in this process, not in Docker")
    parser.add_argument("--base-image", help="base of the service image (default: $BASE_IMAGE or the offline base)")
    service_settings.add_arguments(parser)


def _serve_docker(args: argparse.Namespace, settings: service_settings.ServiceSettings) -> int:
    from harness.docker_run import follow_logs, interrupt_on_signals
    from harness.service_docker import ServiceContainer
    server = ServiceContainer(args.zip, settings, base_image=args.base_image, host_port=args.port)
    with interrupt_on_signals():  # SIGTERM stops it like Ctrl-C
        try:
            with server:
                print(f"grader service ready at {server.url}/grade (container {server.name}); Ctrl-C stops it",
                      flush=True)
                follow_logs(server.container, lambda chunk: print(chunk.decode("utf-8", "replace"), end="", flush=True))
        except KeyboardInterrupt:
            print("grader service stopped (requests in flight were let finish) and its container removed",
                  flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    settings = service_settings.from_args(args)
    if args.local:
        from harness import service_server
        argv = ["--zip", str(args.zip), "--bind", f"127.0.0.1:{args.port}", *service_settings.to_argv(settings)]
        return service_server.main(argv)
    return _serve_docker(args, settings)
