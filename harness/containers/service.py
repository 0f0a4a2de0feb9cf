"""The grader service's container: its image (built offline from pinned wheels) and its lockdown.

* ``service_config`` is a pure function (unit-tested without Docker). It starts from the trainer
  container's ``harness.containers.trainer.run_config`` (read-only root filesystem, the input mounted
  read-only, small ``/tmp`` tmpfs, memory without swap, pids and CPU limits, user nobody, every
  capability dropped, no-new-privileges, no IPC namespace) and changes only what a server needs:
  a network, with port 8000 published on 127.0.0.1 alone, and limits sized for its workers.
* The network is a dedicated bridge with IP masquerading and inter-container traffic off: the
  published port reaches the service, but nothing routes the container's own traffic out
  through the host's NAT, and other containers cannot reach it.
* The image is tagged by a hash of every input of its build context (Dockerfile, installer,
  requirements, wheels, the harness modules it copies) and of the base image's id; it is built
  once per change, with the build's network off.

``ServiceContainer`` runs one: start, wait for ``/readyz``, stop with SIGTERM (gunicorn drains),
always removed. The service's token reaches it as a file: a folder only this user can enter on
the host holds a world-readable copy, bind-mounted read-only at ``/run/secrets/spider-grader``
(never an argument, which ``ps`` shows, nor an environment variable, which ``docker inspect`` shows).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.common import ports, tokens
from harness.common.errors import DockerUnavailable, InputError
from harness.common.http_client import request
from harness.common.layout import require
from harness.containers import trainer as docker_run
from harness.containers.trainer import MOUNT, RunLimits
from harness.service import settings as service_settings
from harness.service.settings import MiB, ServiceSettings

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "service.Dockerfile"
REQUIREMENTS = DOCKER_DIR / "service-requirements.txt"
INSTALLER = DOCKER_DIR / "service-install-wheels.py"
WHEEL_CACHE = ROOT / ".cache" / "service-wheels"
IMAGE_REPO = "spider-scoring-grader"
NETWORK = "spider-scoring-grader"
PORT = 8000
SECRETS_MOUNT = "/run/secrets/spider-grader"
TOKEN_FILE = f"{SECRETS_MOUNT}/token"
# What the image runs: these packages of the harness, copied whole (standard library, gunicorn and
# prometheus_client only; tests/test_contexts.py imports them with nothing else on the path).
SERVICE_PACKAGES = ("common", "service")
NETWORK_OPTIONS = {
    "com.docker.network.bridge.enable_ip_masquerade": "false",  # no NAT out of the host
    "com.docker.network.bridge.enable_icc": "false",  # no traffic between containers
    "com.docker.network.bridge.host_binding_ipv4": "127.0.0.1",  # published ports: loopback by default
}


def service_sources() -> list[Path]:
    """harness/__init__.py and every module of SERVICE_PACKAGES: what the image copies."""
    harness = ROOT / "harness"
    return [harness / "__init__.py"] + [p for pkg in SERVICE_PACKAGES for p in sorted((harness / pkg).rglob("*.py"))]


def service_limits(settings: ServiceSettings, unpacked_bytes: int = 0) -> RunLimits:
    """Container limits for ``settings``: memory for every worker at its RSS ceiling plus the arbiter
    and the tmpfs; a few processes per worker; all cores.

    >>> service_limits(ServiceSettings(workers=2, worker_max_rss_bytes=100 * MiB)).mem_bytes // MiB
    712
    """
    tmpfs = RunLimits().for_bundle(unpacked_bytes).tmpfs_bytes
    return RunLimits(mem_bytes=settings.workers * settings.worker_max_rss_bytes + 256 * MiB + tmpfs,
                     pids=32 + 4 * settings.workers, cpus=float(os.cpu_count() or 1), tmpfs_bytes=tmpfs)


def server_command(settings: ServiceSettings, tasks: bool = False) -> list[str]:
    """The server's arguments inside the container (the image's entry point is the server); ``tasks``:
    the splits are in the mount's ``tasks/`` (the ORS environment)."""
    return ["--zip", f"{MOUNT}/bundle.zip", "--bind", f"0.0.0.0:{PORT}", "--metrics-dir", "/tmp/metrics",
            "--workdir", "/tmp", "--worker-tmp-dir", "/tmp", "--token-file", TOKEN_FILE, *service_settings.to_argv(settings),
            *(["--tasks", f"{MOUNT}/tasks"] if tasks else [])]


def service_config(image: str, mount_dir: str | os.PathLike, *, name: str, settings: ServiceSettings,
                   host_port: int | None = 0, network: str = NETWORK, limits: RunLimits | None = None,
                   environment: dict[str, str] | None = None, secrets_dir: str | os.PathLike | None = None,
                   tasks: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create``: the trainer's lockdown, plus one published
    port (none with ``host_port=None``: behind the proxy) and the token's folder, read-only.

    >>> cfg = service_config("img:1", "/tmp/x", name="g", settings=ServiceSettings(workers=2), host_port=8000,
    ...                      secrets_dir="/tmp/s")
    >>> cfg["ports"], cfg["network"], cfg["read_only"], cfg["cap_drop"], "network_mode" in cfg
    ({'8000/tcp': ('127.0.0.1', 8000)}, 'spider-scoring-grader', True, ['ALL'], False)
    >>> cfg["volumes"]["/tmp/s"], "ports" in service_config("i", "/x", name="g", settings=ServiceSettings(workers=2), host_port=None)
    ({'bind': '/run/secrets/spider-grader', 'mode': 'ro'}, False)
    """
    env = {"PYTHONPATH": "/opt/grader/site-packages:/opt/grader/app", **(environment or {})}
    config = docker_run.run_config(image, server_command(settings, tasks), mount_dir, name=name,
                                   limits=limits or service_limits(settings), environment=env)
    del config["network_mode"]  # "none" in the trainer; the service needs its one port
    config["network"] = network
    if host_port is not None:
        config["ports"] = {f"{PORT}/tcp": ("127.0.0.1", host_port or None)}  # None: the engine picks a free port
    if secrets_dir is not None:
        config["volumes"][str(Path(secrets_dir).resolve())] = {"bind": SECRETS_MOUNT, "mode": "ro"}
    config["stop_signal"] = "SIGTERM"  # gunicorn's graceful shutdown
    return config


def bundle_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The bundle's limit overrides (``SPIDER_SCORING_*``) to pass into the container, as the trainer would.

    >>> bundle_environment({"SPIDER_SCORING_WALL_GUARD_S": "5", "HOME": "/root"})
    {'SPIDER_SCORING_WALL_GUARD_S': '5'}
    """
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.startswith("SPIDER_SCORING_")}


# --- the image ------------------------------------------------------------------------------------

def fetch_wheels(dest: Path = WHEEL_CACHE, say: Callable[[str], None] = print) -> list[Path]:
    """The pinned wheels, downloaded once into ``dest`` (pip, hashes required); their paths."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = [line.split("sha256:")[1].strip() for line in REQUIREMENTS.read_text().splitlines()
            if "--hash=sha256:" in line and not line.lstrip().startswith("#")]
    have = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in dest.glob("*.whl")}
    if not all(pin in have for pin in pins):
        say(f"downloading the service's wheels into {dest} (pinned in {REQUIREMENTS.name})")
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps",
                   "--require-hashes", "-r", str(REQUIREMENTS), "-d", str(dest)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise DockerUnavailable(f"could not download the service's wheels ({' '.join(command)}):\n"
                                    f"{done.stderr.strip()[-1500:]}\nPyPI must be reachable once; later builds use {dest}")
        have = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in dest.glob("*.whl")}
    return sorted(have[pin] for pin in pins if pin in have)


def build_context(dest: Path, wheels: list[Path]) -> dict[str, bytes]:
    """Write the build context into ``dest``; its files (relative name -> bytes)."""
    files = {"service.Dockerfile": DOCKERFILE.read_bytes(), "service-requirements.txt": REQUIREMENTS.read_bytes(),
             "service-install-wheels.py": INSTALLER.read_bytes()}
    files.update({f"wheels/{w.name}": w.read_bytes() for w in wheels})
    files.update({p.relative_to(ROOT).as_posix(): p.read_bytes() for p in service_sources()})
    return write_context(dest, files)


def write_context(dest: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """Write a build context's ``files`` (relative name -> bytes) into ``dest``; return them."""
    for name, data in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    return files


def image_tag(files: dict[str, bytes], base_image_id: str, repo: str = IMAGE_REPO) -> str:
    """The tag: a hash of every file of the build context and the base image's id.

    >>> image_tag({"a": b"1"}, "sha256:x") == image_tag({"a": b"1"}, "sha256:x") != image_tag({"a": b"2"}, "sha256:x")
    True
    """
    digest = hashlib.sha256(base_image_id.encode())
    for name in sorted(files):
        digest.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return f"{repo}:{digest.hexdigest()[:16]}"


def ensure_image(client, base_image: str = docker_run.DEFAULT_BASE_IMAGE, say: Callable[[str], None] = print) -> str:
    """The service image's tag, built on ``base_image`` when not present yet."""
    context = Path(tempfile.mkdtemp(prefix="spider-grader-image-"))

    def tag_for(base_image_id: str) -> str:  # only once the base image is known to be there
        return image_tag(build_context(context, fetch_wheels(say=say)), base_image_id)
    try:
        return docker_run.ensure_built(client, base_image, tag_for, what="service", source=DOCKERFILE.name,
                                       say=say, path=str(context), dockerfile="service.Dockerfile",
                                       network_mode="none")
    finally:
        shutil.rmtree(context, ignore_errors=True)


def ensure_network(client, name: str = NETWORK) -> str:
    """The service's bridge network (created once with ``NETWORK_OPTIONS``); its name."""
    found = client.networks.list(names=[name])
    for network in found:
        if network.name == name:
            options = network.attrs.get("Options") or {}
            if any(options.get(k) != v for k, v in NETWORK_OPTIONS.items()):
                raise DockerUnavailable(f"docker network {name} exists with other options: remove it "
                                        f"(`docker network rm {name}`) and run again")
            return name
    client.networks.create(name, driver="bridge", options=dict(NETWORK_OPTIONS),
                           labels={"spider-scoring.network": "grader"})
    return name


# --- running --------------------------------------------------------------------------------------

def _unpacked_bytes(zip_path: Path) -> int:
    try:
        with zipfile.ZipFile(zip_path) as archive:
            return sum(i.file_size for i in archive.infolist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read the bundle zip {zip_path} ({exc}): rebuild it with `make pack`") from None


def write_secret(folder: Path, name: str, text: str) -> Path:
    """``folder/name`` holding ``text``, readable by the container's user (nobody) through a bind
    mount of ``folder``; ``folder`` sits in a private temporary folder no other host user can enter."""
    folder.mkdir(mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o644)
    return path


class ServiceContainer:
    """The service in its locked-down container on 127.0.0.1; a context manager, always removed.

    ``network`` (default: the service's bridge) and ``publish`` (default: port 8000 on 127.0.0.1)
    let the public deployment (``harness.containers.public``) put it behind the proxy instead.
    """

    def __init__(self, zip_path: str | os.PathLike, settings: ServiceSettings | None = None, *,
                 base_image: str = docker_run.DEFAULT_BASE_IMAGE, host_port: int = 0, environment: dict[str, str] | None = None,
                 say: Callable[[str], None] = print, token: str | None = None, network: str | None = None,
                 publish: bool = True, tasks: str | os.PathLike | None = None) -> None:
        self.zip_path = Path(zip_path)
        self.tasks = Path(tasks) if tasks is not None else None  # a prepared folder's data/: the ORS environment
        self.settings = settings or ServiceSettings()
        self.base_image, self.host_port, self.say = base_image, host_port, say
        self.environment = bundle_environment() if environment is None else environment
        self.token = token or tokens.generate()
        self.network, self.publish = network, publish
        self.name = f"spider-scoring-grader-{uuid.uuid4().hex[:12]}"
        self.client: Any = None  # docker SDK objects (the SDK has no type hints)
        self.container: Any = None
        self.staging: Path | None = None
        self.secrets: Path | None = None
        self.host, self.port = "127.0.0.1", 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, ready_timeout: float = 120.0) -> ServiceContainer:
        """Build (if needed) and start the container, then (when published) wait until the service is ready."""
        require(self.zip_path, "the bundle zip")
        self.client = docker_run.connect()
        tag = ensure_image(self.client, self.base_image, say=self.say)
        network = self.network or ensure_network(self.client)
        # A world-readable copy: the container's user (nobody) cannot read a private folder.
        self.staging = Path(tempfile.mkdtemp(prefix="spider-grader-run-"))
        shutil.copyfile(self.zip_path, self.staging / "bundle.zip")
        os.chmod(self.staging / "bundle.zip", 0o644)
        if self.tasks is not None:  # the splits the ORS environment serves, world-readable like the zip
            (self.staging / "tasks").mkdir(mode=0o755)
            for name in ("rl.jsonl", "eval.jsonl"):
                if (self.tasks / name).is_file():
                    shutil.copyfile(self.tasks / name, self.staging / "tasks" / name)
                    os.chmod(self.staging / "tasks" / name, 0o644)
            os.chmod(self.staging / "tasks", 0o755)
        os.chmod(self.staging, 0o755)
        self.secrets = Path(tempfile.mkdtemp(prefix="spider-grader-secrets-"))  # 0700: this user only
        write_secret(self.secrets / "mount", "token", self.token + "\n")
        config = service_config(tag, self.staging, name=self.name, settings=self.settings,
                                host_port=self.host_port if self.publish else None, network=network,
                                environment=self.environment, secrets_dir=self.secrets / "mount", tasks=self.tasks is not None,
                                limits=service_limits(self.settings, _unpacked_bytes(self.zip_path)))
        self.container = self.client.containers.create(**config)
        try:
            self.container.start()
        except Exception as exc:  # the engine's APIError: a published port already taken is the user's to change
            taken = ports.from_engine_error(exc, "127.0.0.1", self.host_port) if self.publish else None
            if taken is None:
                raise
            raise taken from None
        if not self.publish:
            return self
        self.container.reload()
        bound = (self.container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{PORT}/tcp") or []
        if not bound:
            raise DockerUnavailable(f"container {self.name} has no published port:\n{self.logs()[-2000:]}")
        self.port = int(bound[0]["HostPort"])
        self.wait_ready(ready_timeout)
        return self

    def check_running(self) -> None:
        """DockerUnavailable with the end of its log when the container is no longer running."""
        self.container.reload()
        if self.container.status not in ("created", "running"):
            raise DockerUnavailable(f"the service container exited ({self.container.status}):\n{self.logs()[-3000:]}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            try:
                if request(self.host, self.port, "GET", "/readyz", timeout=2.0).status == 200:
                    return
            except OSError:
                pass
            except Exception:  # the engine's proxy may drop a connection while the server starts
                pass
            time.sleep(0.2)
        raise DockerUnavailable(f"the service container was not ready within {timeout:g} s:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        if self.container is None:
            return ""
        return self.container.logs(stdout=True, stderr=True).decode("utf-8", "replace")

    def stop(self) -> int | None:
        """SIGTERM and wait (gunicorn drains in-flight requests); its exit code; then removed."""
        with docker_run.signals_deferred():
            return self._stop()

    def _stop(self) -> int | None:
        try:
            return docker_run.stop_and_remove(self.client, self.container, self.name,
                                              self.settings.graceful_timeout_s, self.say)
        finally:
            for folder in (self.staging, self.secrets):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> ServiceContainer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
