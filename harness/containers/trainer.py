"""The trainer container: its image, its locked-down run configuration, and running it safely.

* ``run_config`` is a pure function (unit-tested without Docker): no network, read-only root
  filesystem, inputs mounted read-only, a small ``/tmp`` tmpfs, no IPC namespace (so no
  ``/dev/shm``), memory (no swap), process and CPU limits, user 65534 (nobody), every capability
  dropped, no-new-privileges.
* Images are tagged by a hash of their inputs (the Dockerfile and the base image's id), so a
  changed input means a new tag and an unchanged one is never rebuilt.
* ``run_container`` removes the container in ``finally``: after success, failure, timeout, Ctrl-C
  (SIGINT) and SIGTERM / SIGHUP alike.

Inputs reach the container as a staged copy (folders 0755, files 0644) bind-mounted at
``/opt/spider``: the harness's stdlib-only runner under ``harness/``, the hostile suite under
``fixtures/hostile/``, the zip, splits and completions under ``in/``. The copy is what lets an
unprivileged user read inputs that live in private folders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors

import docker
from harness.common.errors import DockerUnavailable, InputError, error_for_exit_code

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "trainer.Dockerfile"
IMAGE_REPO = "spider-scoring-trainer"
MOUNT = "/opt/spider"
USER = "65534:65534"
LABEL = "spider-scoring.run"
# A public Python image by default; where Docker Hub is out of reach (CI here, the tests) BASE_IMAGE
# names the offline one (`make docker-base` builds spider-scoring-base:bookworm).
PUBLIC_BASE_IMAGE = "python:3.11-slim"
DEFAULT_BASE_IMAGE = os.environ.get("BASE_IMAGE") or PUBLIC_BASE_IMAGE
MiB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class RunLimits:
    """Resource limits of one container. Memory leaves room for the scorer's SQLite heap ceiling
    (``heap_limit_bytes``, raised up to 1 GiB by some users) plus Python and the tmpfs, which
    counts against the same cgroup."""

    mem_bytes: int = 2048 * MiB
    pids: int = 128
    cpus: float = 2.0
    tmpfs_bytes: int = 256 * MiB

    def for_bundle(self, unpacked_bytes: int) -> RunLimits:
        """Limits whose tmpfs holds the unpacked bundle with 64 MiB to spare (never smaller than now)."""
        return dataclasses.replace(self, tmpfs_bytes=max(self.tmpfs_bytes, unpacked_bytes + 64 * MiB))


def run_config(image: str, command: list[str], mount_dir: str | os.PathLike, *, name: str,
               limits: RunLimits = RunLimits(), environment: dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create``: the whole lockdown in one place.

    >>> cfg = run_config("img:1", ["python3", "-V"], "/tmp/x", name="t")
    >>> cfg["network_mode"], cfg["read_only"], cfg["cap_drop"], cfg["user"]
    ('none', True, ['ALL'], '65534:65534')
    """
    return {
        "image": image,
        "command": list(command),
        "name": name,
        "labels": {LABEL: name},
        "user": USER,
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "ipc_mode": "none",
        "mem_limit": limits.mem_bytes,
        "memswap_limit": limits.mem_bytes,  # equal: no swap
        "pids_limit": limits.pids,
        "nano_cpus": int(limits.cpus * 1e9),
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmpfs_bytes},mode=1777"},
        "volumes": {str(Path(mount_dir).resolve()): {"bind": MOUNT, "mode": "ro"}},
        "working_dir": "/",
        "environment": {"PYTHONPATH": MOUNT, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                        "HOME": "/tmp", **(environment or {})},
        "stdin_open": False,
        "tty": False,
    }


def image_tag(dockerfile: bytes, base_image_id: str) -> str:
    """The image's tag: a hash of everything it is built from.

    >>> image_tag(b"FROM x", "sha256:1") == image_tag(b"FROM x", "sha256:1") != image_tag(b"FROM y", "sha256:1")
    True
    """
    digest = hashlib.sha256(dockerfile + b"\0" + base_image_id.encode()).hexdigest()
    return f"{IMAGE_REPO}:{digest[:16]}"


# --- the engine -----------------------------------------------------------------------------------

def engine_problem() -> str | None:
    """Why no Docker engine can be used (None when one answers a ping)."""
    try:
        docker.from_env(timeout=10).ping()
    except Exception as exc:  # any failure to reach the engine means the same thing to the caller
        return f"docker engine not reachable ({type(exc).__name__}: {exc}); start one with `make docker-engine`"
    return None


def connect():
    """A docker SDK client; DockerUnavailable (saying what to do) when no engine answers."""
    problem = engine_problem()
    if problem:
        raise DockerUnavailable(problem)
    return docker.from_env(timeout=60)


def ensure_built(client, base_image: str, tag_for: Callable[[str], str], *, what: str, source: str,
                 say: Callable[[str], None] = print, **build_args: Any) -> str:
    """An image's tag, built on ``base_image`` when not present yet; shared by the trainer and service images.

    ``tag_for(base_image_id)`` gives the tag (a hash of the build's inputs); ``build_args`` go to
    ``client.images.build`` (the Dockerfile, or the context path). DockerUnavailable, saying what to
    do, when the base image is missing or the build fails (with the end of its log).
    """
    try:
        base = client.images.get(base_image)
    except docker.errors.ImageNotFound:
        raise DockerUnavailable(
            f"base image {base_image} is not present: build the offline one with `make docker-base`, "
            f"or `docker pull python:3.11-slim` and pass BASE_IMAGE=python:3.11-slim") from None
    tag = tag_for(base.id)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    network_off = ", network off" if build_args.get("network_mode") == "none" else ""
    say(f"building {tag} from {source} on {base_image} (once per input change{network_off})")
    try:
        client.images.build(tag=tag, buildargs={"BASE_IMAGE": base_image}, pull=False, rm=True, forcerm=True,
                            labels={"spider-scoring.base": base.id}, **build_args)
    except docker.errors.BuildError as exc:
        log = "".join(str(part.get("stream", "")) for part in exc.build_log)[-2000:]
        raise DockerUnavailable(f"building the {what} image failed: {exc}\n{log}") from None
    return tag


def ensure_image(client, base_image: str = DEFAULT_BASE_IMAGE, dockerfile: Path = DOCKERFILE,
                 say: Callable[[str], None] = print) -> str:
    """The trainer image's tag, built from ``dockerfile`` on ``base_image`` when not present yet."""
    text = dockerfile.read_bytes()
    return ensure_built(client, base_image, lambda base_id: image_tag(text, base_id), what="trainer",
                        source=dockerfile.name, say=say, fileobj=io.BytesIO(text))


# --- staging inputs -------------------------------------------------------------------------------

# What the trainer container runs: these packages of the harness, copied whole (standard library only).
CONTAINER_PACKAGES = ("common", "emulator")


def container_sources() -> list[Path]:
    """harness/__init__.py and every module of CONTAINER_PACKAGES."""
    harness = ROOT / "harness"
    return [harness / "__init__.py"] + [p for pkg in CONTAINER_PACKAGES for p in sorted((harness / pkg).rglob("*.py"))]

def stage_inputs(dest: Path, inputs: dict[str, Path]) -> None:
    """Copy the runner's sources and ``inputs`` (relative name -> file) under ``dest``, world-readable."""
    files = {p.relative_to(ROOT).as_posix(): p for p in container_sources()}
    files["fixtures/hostile/cases.json"] = ROOT / "fixtures" / "hostile" / "cases.json"
    files.update(inputs)
    for relative, source in files.items():
        if not Path(source).is_file():
            raise InputError(f"input {source} is missing or not a file")
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        os.chmod(target, 0o644)
    for folder, _dirs, _files in os.walk(dest):
        os.chmod(folder, 0o755)


# --- running --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ContainerResult:
    exit_code: int
    stdout: bytes
    stderr: str
    seconds: float
    timed_out: bool = False
    oom_killed: bool = False
    name: str = ""


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP become KeyboardInterrupt, so ``finally`` runs for them as for
    Ctrl-C (in the main thread; elsewhere nothing changes). The previous handlers come back after."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """Inside (cleanup: stopping and removing containers), SIGINT, SIGTERM and SIGHUP are noted in
    the yielded list instead of raised, so a second Ctrl-C or a SIGTERM sent twice (by ``make``
    and ``timeout`` alike) cannot leave a container or a network behind. Main thread only."""
    noted: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield noted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_and_remove(client, container, name: str, grace_s: float, say: Callable[[str], None]) -> int | None:
    """SIGTERM ``container`` (``grace_s`` to finish in-flight work), wait for its exit code, then
    force-remove it whatever happened; the exit code, None when it could not be read."""
    code = None
    try:
        if container is not None:
            container.stop(timeout=int(grace_s) + 5)
            code = int(container.wait(timeout=30).get("StatusCode", -1))
    except Exception as exc:  # noqa: BLE001 - stopping failed: removal below still happens
        say(f"warning: stopping {name} failed ({exc})")
    finally:
        if client is not None:
            remove_container(client, name)
    return code


def remove_container(client, name: str) -> None:
    """Force-remove the container ``name``; a warning naming it when that fails."""
    try:
        client.containers.get(name).remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        print(f"warning: could not remove container {name} ({exc}); remove it with `docker rm -f {name}`")


_END = object()


def follow_logs(container, on_chunk: Callable[[bytes], None], *, stdout: bool = True, stderr: bool = True,
                deadline: float | None = None) -> bool:
    """Give each chunk of the container's log to ``on_chunk`` until the log ends; False at ``deadline``.

    The log is read in a helper thread; this (the main) thread waits on a queue in short slices.
    A signal sent to the process may be delivered to any of its threads, and one delivered to a
    thread other than the main thread does not interrupt a blocking read there: the main thread
    must never block on the log itself, or Ctrl-C would wait for the container's next line.
    """
    chunks: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=stdout, stderr=stderr):
                chunks.put(chunk)
        except Exception as exc:  # noqa: BLE001 - handed to the main thread, raised there
            chunks.put(exc)
        finally:
            chunks.put(_END)

    threading.Thread(target=read, name="container-log", daemon=True).start()
    while True:
        try:
            item = chunks.get(timeout=0.2)
        except queue.Empty:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            continue
        if item is _END:
            return True
        if isinstance(item, Exception):
            raise item
        on_chunk(item)


def run_container(client, config: dict[str, Any], *, timeout_s: float = 3600.0,
                  on_stderr: Callable[[str], None] | None = None) -> ContainerResult:
    """Create, start and follow one container; always removed, whatever happens (Ctrl-C included)."""
    started = time.monotonic()
    with interrupt_on_signals():
        try:
            container = client.containers.create(**config)
            container.start()
            parts: list[str] = []

            def keep(chunk: bytes) -> None:
                text = chunk.decode("utf-8", "replace")
                parts.append(text)
                if on_stderr is not None:
                    on_stderr(text)

            finished = follow_logs(container, keep, stdout=False, deadline=started + timeout_s)
            if not finished:
                try:
                    container.kill()
                except Exception:  # noqa: BLE001 - already gone: nothing left to stop
                    pass
            status = container.wait()
            stdout = container.logs(stdout=True, stderr=False)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
            return ContainerResult(int(status.get("StatusCode", -1)), stdout, "".join(parts),
                                   time.monotonic() - started, not finished, oom, config["name"])
        finally:
            remove_container(client, config["name"])


def run_job(command: list[str], inputs: dict[str, Path], *, base_image: str = DEFAULT_BASE_IMAGE,
            limits: RunLimits = RunLimits(), timeout_s: float = 3600.0,
            on_stderr: Callable[[str], None] | None = None, say: Callable[[str], None] = print) -> ContainerResult:
    """Run ``command`` in the trainer image with ``inputs`` staged under /opt/spider/in/ (read-only)."""
    client = connect()
    tag = ensure_image(client, base_image, say=say)
    staging = Path(tempfile.mkdtemp(prefix="spider-scoring-run-"))
    try:
        stage_inputs(staging, {f"in/{name}": path for name, path in inputs.items()})
        name = f"spider-scoring-{uuid.uuid4().hex[:12]}"
        config = run_config(tag, command, staging, name=name, limits=limits)
        return run_container(client, config, timeout_s=timeout_s, on_stderr=on_stderr)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def emulator_job(job: list[str], inputs: dict[str, Path], *, unpacked_bytes: int = 0,
                 base_image: str = DEFAULT_BASE_IMAGE, timeout_s: float = 3600.0, cpus: float | None = None,
                 say: Callable[[str], None] = print) -> tuple[dict, ContainerResult]:
    """Run ``python3 -m harness.emulator.main JOB...`` in the container; its JSON document and the run.

    Progress (the container's stderr) is shown as it comes. A document with ``error`` is raised as
    the harness error it names; a container that died without a document is DockerUnavailable
    naming the cause (timeout, out of memory, or the last lines it wrote). ``cpus`` replaces the
    container's CPU limit (``docker run --cpus``).
    """
    limits = RunLimits().for_bundle(unpacked_bytes)
    if cpus is not None:
        limits = dataclasses.replace(limits, cpus=cpus)
    result = run_job(["python3", "-m", "harness.emulator.main", *job], inputs, base_image=base_image,
                     limits=limits, timeout_s=timeout_s, say=say,
                     on_stderr=lambda text: print(text, end="", flush=True))
    lines = [line for line in result.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        document = json.loads(lines[-1])
    except (IndexError, ValueError):
        cause = (f"it ran over the time limit of {timeout_s:g} s" if result.timed_out else
                 f"it ran out of memory (limit {limits.mem_bytes // MiB} MiB)" if result.oom_killed else
                 f"it exited {result.exit_code}: {result.stderr.strip()[-800:]}")
        raise DockerUnavailable(f"the trainer container gave no result: {cause}") from None
    if "error" in document:
        message = str(document["error"])
        for name, path in inputs.items():  # name the user's files, not their mounted copies
            message = message.replace(f"{MOUNT}/in/{name}", str(path))
        raise error_for_exit_code(document.get("exit_code"))(message)
    return document, result
