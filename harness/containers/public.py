"""The grader service where a remote trainer can reach it: the service behind its proxy.

Two containers, started and stopped together by ``PublicService`` (``serve --public``,
``loadtest --via-proxy``, the tests):

* the service (``harness.containers.service``), on an internal network of its own (Docker's
  ``internal``: no route out, no published port, nothing but the proxy can reach it);
* the proxy (``harness.containers.proxy``, nginx), on that network and on the service's bridge,
  where its port 8443 alone is published (on ``listen``: 127.0.0.1 by default, ``0.0.0.0`` on a
  public machine). It ends TLS, checks the token, buffers whole requests and answers, enforces the
  body sizes and the slow-client timeouts (``harness.proxy.nginx_conf``).

Secrets (the token, the TLS key) live in a temporary folder only this user can enter; the
containers read world-readable copies through read-only bind mounts. Everything is removed on
stop, after Ctrl-C or SIGTERM too; the internal network is removed with the containers.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.common import ports
from harness.common.errors import DockerUnavailable, InputError
from harness.common.http_client import Endpoint, request, tls_context
from harness.containers import proxy as proxy_image
from harness.containers import trainer as docker_run
from harness.containers.service import PORT, ServiceContainer, ensure_network, write_secret
from harness.proxy.nginx_conf import LISTEN_PORT, ProxySettings, nginx_config
from harness.service.settings import ServiceSettings

INTERNAL_LABEL = "spider-scoring.network"


def upstream_timeout_s(settings: ServiceSettings) -> float:
    """How long the proxy waits for an answer: a whole batch, one envelope's hard limit and a margin.

    >>> upstream_timeout_s(ServiceSettings(workers=2))
    485.0
    """
    return settings.request_timeout_s + settings.envelope_timeout_s + 5.0


def create_internal_network(client, name: str) -> Any:
    """A network with no way out (Docker's ``internal``): the service and the proxy, nothing else."""
    return client.networks.create(name, driver="bridge", internal=True,
                                  options={"com.docker.network.bridge.enable_ip_masquerade": "false"},
                                  labels={INTERNAL_LABEL: "internal"})


class PublicService:
    """The service and its proxy; a context manager, both containers and the network always removed."""

    def __init__(self, zip_path: str | os.PathLike, settings: ServiceSettings | None = None,
                 proxy_settings: ProxySettings | None = None, *, token: str, cert: Path | None = None,
                 key: Path | None = None, server_name: str = "localhost", listen: str = "127.0.0.1", port: int = 0,
                 base_image: str = docker_run.DEFAULT_BASE_IMAGE, environment: dict[str, str] | None = None,
                 say: Callable[[str], None] = print, tasks: str | os.PathLike | None = None) -> None:
        if (cert is None) != (key is None):
            raise InputError("give both --cert and --key (your certificate and its private key, PEM), or neither "
                             "for a self-signed certificate")
        self.zip_path, self.token, self.cert, self.key = Path(zip_path), token, cert, key
        self.settings = settings or ServiceSettings()
        self.proxy_settings = proxy_settings or ProxySettings()
        self.server_name, self.listen, self.host_port, self.base_image, self.say = server_name, listen, port, base_image, say
        self.name = f"spider-scoring-proxy-{uuid.uuid4().hex[:12]}"
        self.grader = ServiceContainer(zip_path, self.settings, base_image=base_image, environment=environment,
                                       say=say, token=token, network=f"spider-scoring-internal-{uuid.uuid4().hex[:12]}",
                                       publish=False, tasks=tasks)
        self.client: Any = None
        self.container: Any = None
        self.network: Any = None
        self.secrets: Path | None = None
        self.port = 0

    # -- what clients need -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The public base URL, as a trainer on another machine writes it (the token not included)."""
        return f"https://{self.server_name}" + ("" if self.port == 443 else f":{self.port}")

    @property
    def cert_file(self) -> Path:
        if self.secrets is None:
            raise DockerUnavailable("the public service is not started")
        return self.secrets / "proxy" / "cert.pem"

    def endpoint(self, *, token: bool = True, path_token: bool = True) -> Endpoint:
        """This machine's way in (127.0.0.1, TLS verified against the served certificate's own file
        when it is self-signed); the token in the path, or none."""
        context = tls_context(str(self.cert_file) if self.cert is None else None)  # self-signed: names 127.0.0.1 too
        if self.cert is not None:
            context.check_hostname = False  # the user's certificate names server_name; here it is reached on loopback
        prefix = f"/t/{self.token}" if token and path_token else ""
        return Endpoint("127.0.0.1" if self.listen in ("0.0.0.0", "") else self.listen, self.port, context, prefix)

    # -- running ----------------------------------------------------------------------------------
    def start(self, ready_timeout: float = 120.0) -> PublicService:
        self.client = docker_run.connect()
        tag = proxy_image.ensure_image(self.client, self.base_image, say=self.say)
        self.secrets = Path(tempfile.mkdtemp(prefix="spider-proxy-secrets-"))  # 0700: this user only
        self.network = create_internal_network(self.client, str(self.grader.network))
        self.grader.start()
        config_dir = self._write_config(f"{self.grader.name}:{PORT}")
        config = proxy_image.proxy_config(tag, config_dir, name=self.name, network=ensure_network(self.client),
                                          listen=self.listen, host_port=self.host_port,
                                          limits=proxy_image.proxy_limits(self.settings.max_batch_bytes))
        self.container = self.client.containers.create(**config)
        self.network.connect(self.container)
        try:
            self.container.start()
        except Exception as exc:  # the engine's APIError: a published port already taken is the user's to change
            taken = ports.from_engine_error(exc, self.listen, self.host_port)
            if taken is None:
                raise
            raise taken from None
        self.container.reload()
        bound = (self.container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{LISTEN_PORT}/tcp") or []
        if not bound:
            raise DockerUnavailable(f"the proxy container {self.name} has no published port:\n{self.logs()[-2000:]}")
        self.port = int(bound[0]["HostPort"])
        self.wait_ready(ready_timeout)
        return self

    def _write_config(self, upstream: str) -> Path:
        """nginx.conf, the certificate and key, the token: the proxy's read-only folder."""
        assert self.secrets is not None
        folder = self.secrets / "proxy"
        text = nginx_config(self.proxy_settings, upstream=upstream, token=self.token,
                            max_body_bytes=self.settings.max_body_bytes, max_batch_bytes=self.settings.max_batch_bytes,
                            upstream_timeout_s=upstream_timeout_s(self.settings))
        write_secret(folder, "nginx.conf", text)
        write_secret(folder, "token", self.token + "\n")
        if self.cert is None or self.key is None:
            proxy_image.self_signed(folder / "cert.pem", folder / "key.pem", [self.server_name, "127.0.0.1"])
        else:
            for source, name in ((self.cert, "cert.pem"), (self.key, "key.pem")):
                if not source.is_file():
                    raise InputError(f"{source} is not a file: give the PEM certificate (--cert) and its key (--key)")
                shutil.copyfile(source, folder / name)
        for name in ("cert.pem", "key.pem"):
            os.chmod(folder / name, 0o644)  # nobody must read them in the container; the folder above is private
        return folder

    def wait_ready(self, timeout: float) -> None:
        """Until ``/readyz`` answers 200 through the proxy (the whole chain works), or a container stops."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # readiness only: any certificate
        host = self.endpoint().host
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.grader.check_running()
            self.container.reload()
            if self.container.status not in ("created", "running"):
                raise DockerUnavailable(f"the proxy container exited ({self.container.status}):\n{self.logs()[-3000:]}")
            try:
                if request(host, self.port, "GET", "/readyz", timeout=2.0, tls=context).status == 200:
                    return
            except Exception:  # noqa: BLE001 - not up yet (refused, reset, TLS not ready): try again
                pass
            time.sleep(0.2)
        raise DockerUnavailable(f"the public service was not ready within {timeout:g} s:\n{self.logs()[-3000:]}\n"
                                f"{self.grader.logs()[-3000:]}")

    def logs(self) -> str:
        """The proxy container's log (the service's: ``self.grader.logs()``)."""
        if self.container is None:
            return ""
        return self.container.logs(stdout=True, stderr=True).decode("utf-8", "replace")

    def stop(self) -> tuple[int | None, int | None]:
        """Stop the proxy (nginx finishes what is in flight), then the service; remove both, the
        network and the secrets, whatever signal comes meanwhile. Their exit codes."""
        with docker_run.signals_deferred():
            return self._stop()

    def _stop(self) -> tuple[int | None, int | None]:
        code = docker_run.stop_and_remove(self.client, self.container, self.name, self.settings.graceful_timeout_s,
                                          self.say)
        grader_code = self.grader.stop()
        try:
            if self.network is not None:
                self.network.remove()
        except Exception as exc:  # noqa: BLE001
            self.say(f"warning: could not remove network {self.grader.network} ({exc}); `docker network rm` it")
        if self.secrets is not None:
            shutil.rmtree(self.secrets, ignore_errors=True)
        return code, grader_code

    def __enter__(self) -> PublicService:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
