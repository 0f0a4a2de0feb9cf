"""`serve`: the bundle's grader as an HTTP service (`http:URL` graders), on 127.0.0.1 or behind its proxy.

    python3 -m harness serve [--zip out/spider-scoring.zip] [--port 8000] [--local] [--workers N ...]
    python3 -m harness serve --public [--listen 0.0.0.0] [--server-name HOST] [--cert FILE --key FILE]

By default the service runs in its locked-down container (harness.containers.service): built
once per input change, the zip mounted read-only, port 8000 published on 127.0.0.1:PORT.
``--public`` puts the proxy in front (harness.containers.public): nginx ends TLS, checks the
token, buffers whole requests and bounds slow clients; only its port is published, on
``--listen``. ``--local`` runs the server in this process, without Docker.

Every grading request needs the service's token: from ``--token-file`` (created with a new token
when missing) or ``$SPIDER_GRADER_TOKEN``, else a new one for this run. The URL to hand the
trainer, token included, is printed once on this terminal; no log line carries the token. The
containers' JSON logs follow until Ctrl-C or SIGTERM, which stop them gracefully and remove them.

The port is checked first (harness.common.ports): one already in use, below 1024 without root, or on
an address that is not this machine's is PortUnavailable (exit 11) saying how to choose another,
before any image is built.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
from pathlib import Path

from harness.commands import options
from harness.common import ports, tokens
from harness.common.errors import InputError
from harness.common.interrupts import interrupt_on_signals
from harness.common.layout import DEFAULT_DATA, Prepared, require
from harness.containers.public import PublicService
from harness.containers.service import ServiceContainer
from harness.containers.trainer import follow_logs
from harness.proxy import nginx_conf
from harness.service import server, settings

PUBLIC_ONLY = ("listen", "server_name", "cert", "key")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zip", type=Path, default=Prepared(DEFAULT_DATA).zip, metavar="ZIP",
                        help="the bundle zip to serve (default: out/spider-scoring.zip)")
    parser.add_argument("--port", type=int, metavar="PORT",
                        help="published port (default: 8000 on 127.0.0.1; 8443 with --public; 0: any free port)")
    parser.add_argument("--local", action="store_true", help="run the server in this process, not in Docker")
    parser.add_argument("--tasks", type=Path, metavar="DATA",
                        help="a prepared folder: serve its rl and eval splits as the Open Reward Standard's environment "
                             "'spider' (sessions, discovery, a submit tool; docs/service.md). Default: no ORS routes")
    options.add_token_file(parser, "created with a new token when missing; neither: a new token for this run")
    public = parser.add_argument_group("behind the proxy (--public)")
    public.add_argument("--public", action="store_true",
                        help="put the proxy in front (TLS, the token checked, whole requests, slow clients bounded) "
                             "and publish its port alone")
    public.add_argument("--listen", metavar="ADDRESS",
                        help="address the proxy's port is published on (default: 127.0.0.1; 0.0.0.0 on a public machine)")
    public.add_argument("--server-name", metavar="HOST",
                        help="the name or address trainers reach this machine by: in the printed URL and in a "
                             "self-signed certificate (default: localhost)")
    public.add_argument("--cert", type=Path, metavar="FILE",
                        help="TLS certificate chain (PEM; default: a self-signed one for --server-name, made for this run)")
    public.add_argument("--key", type=Path, metavar="FILE", help="the certificate's private key (PEM)")
    nginx_conf.add_arguments(public)
    options.add_base_image(parser)
    settings.add_arguments(parser)


def _tasks_folder(data: Path) -> Path:
    """The splits folder of a prepared folder; InputError when it holds neither the rl nor the eval split."""
    folder = Prepared(data).split("rl").parent
    if not any((folder / f"{name}.jsonl").is_file() for name in ("rl", "eval")):
        raise InputError(f"--tasks {data}: no data/rl.jsonl nor data/eval.jsonl there; prepare it first "
                         "(python3 -m harness prepare --output DIR)")
    return folder


def _token(args: argparse.Namespace) -> tuple[str, str]:
    token, source = tokens.from_sources(args.token_file, create=True)
    if token is None:
        return tokens.generate(), "new for this run; --token-file FILE keeps one across restarts"
    return token, source


def announce(base_url: str, token: str, source: str) -> None:
    """The one place the token is shown: this terminal, once, as the trainer's grader URL."""
    print(f"grader URL for the trainer (token: {source}; printed once, never logged):\n"
          f"  http:{base_url}/t/{token}/grade", flush=True)


def _print_chunk(chunk: bytes) -> None:
    print(chunk.decode("utf-8", "replace"), end="", flush=True)


def _serve_local(args: argparse.Namespace, chosen: settings.ServiceSettings, token: str, source: str) -> int:
    port = 8000 if args.port is None else args.port
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:  # taken since the check (another process was quicker)
        listener.close()
        known = ports.from_bind_error(exc, "127.0.0.1", port)
        if known is None:
            raise
        raise known from None
    listener.listen(256)
    os.set_inheritable(listener.fileno(), True)
    announce(f"http://127.0.0.1:{listener.getsockname()[1]}", token, source)
    argv = ["--zip", str(args.zip), "--bind", f"fd://{listener.fileno()}", *settings.to_argv(chosen)]
    if args.tasks is not None:
        argv += ["--tasks", str(_tasks_folder(args.tasks))]
    if args.token_file is not None:
        argv += ["--token-file", str(args.token_file)]
    else:
        os.environ[tokens.ENV] = token  # this process's own environment: not an argument, not in `ps`
    return server.main(argv)


def _serve_docker(args: argparse.Namespace, chosen: settings.ServiceSettings, token: str, source: str) -> int:
    container = ServiceContainer(args.zip, chosen, base_image=options.base_image_of(args),
                                 host_port=8000 if args.port is None else args.port, token=token,
                                 tasks=_tasks_folder(args.tasks) if args.tasks is not None else None)
    with interrupt_on_signals():  # SIGTERM stops it like Ctrl-C
        try:
            with container:
                print(f"grader service ready at {container.url}/grade (container {container.name}); "
                      "Ctrl-C stops it", flush=True)
                announce(container.url, token, source)
                follow_logs(container.container, _print_chunk)
        except KeyboardInterrupt:
            print("grader service stopped (requests in flight were let finish) and its container removed",
                  flush=True)
    return 0


def _serve_public(args: argparse.Namespace, chosen: settings.ServiceSettings, token: str, source: str) -> int:
    deployment = PublicService(args.zip, chosen, nginx_conf.from_args(args), token=token, cert=args.cert, key=args.key,
                               server_name=args.server_name or "localhost", listen=args.listen or "127.0.0.1",
                               port=8443 if args.port is None else args.port, base_image=options.base_image_of(args),
                               tasks=_tasks_folder(args.tasks) if args.tasks is not None else None)
    with interrupt_on_signals():
        try:
            with deployment:
                print(f"grader service ready behind its proxy at {deployment.url}/grade (published on "
                      f"{deployment.listen}:{deployment.port}; containers {deployment.name}, {deployment.grader.name}); "
                      "Ctrl-C stops them", flush=True)
                announce(deployment.url, token, source)
                threading.Thread(target=follow_logs, args=(deployment.grader.container, _print_chunk), daemon=True).start()
                follow_logs(deployment.container, _print_chunk)
        except KeyboardInterrupt:
            print("grader service and proxy stopped (requests in flight were let finish), containers and network removed",
                  flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    chosen = settings.from_args(args)
    require(args.zip, "the bundle zip")
    if args.public and args.local:
        raise InputError("--public and --local exclude each other: the proxy runs in Docker")
    given = [name for name in PUBLIC_ONLY if getattr(args, name) is not None]
    if given and not args.public:
        raise InputError(f"--{given[0].replace('_', '-')} applies to the proxy: add --public")
    if args.public:
        ports.check_free(args.listen or "127.0.0.1", 8443 if args.port is None else args.port)
    else:
        ports.check_free("127.0.0.1", 8000 if args.port is None else args.port)
    token, source = _token(args)
    if args.local:
        return _serve_local(args, chosen, token, source)
    if args.public:
        return _serve_public(args, chosen, token, source)
    return _serve_docker(args, chosen, token, source)
