"""The proxy's container: its image (nginx from Debian's packages, built offline) and its lockdown.

* ``proxy_config`` is a pure function (unit-tested without Docker): the trainer container's
  lockdown (read-only root filesystem, every capability dropped, no-new-privileges, user nobody,
  no IPC namespace, memory without swap, pids and CPU limits, a ``noexec`` tmpfs on ``/tmp`` for
  nginx's buffers) with the configuration folder mounted read-only at ``/etc/spider-proxy`` and
  one published port.
* The image is built on ``BASE_IMAGE`` from the .deb files of ``docker/proxy-packages.txt``,
  downloaded on the host by ``apt-get download`` (apt checks them against Debian's signed
  archive) once into ``.cache/proxy-debs/<release>/``; the build's network is off. The base must be
  the host's Debian release, which is checked first. The tag is a hash of every file of the
  context and the base image's id.
* ``self_signed`` makes a certificate for tests and first tries (``openssl`` on the host).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors

from harness.common.errors import DockerUnavailable, InputError
from harness.containers import trainer as docker_run
from harness.containers.service import image_tag, write_context
from harness.containers.trainer import RunLimits
from harness.proxy.nginx_conf import CONFIG_DIR, LISTEN_PORT

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "proxy.Dockerfile"
PACKAGES = DOCKER_DIR / "proxy-packages.txt"
DEB_CACHE = ROOT / ".cache" / "proxy-debs"
IMAGE_REPO = "spider-scoring-proxy"
PROXY_PACKAGES = ("common", "proxy")  # harness packages copied whole into the image
MiB = 1024 * 1024


def packages(text: str | None = None) -> list[str]:
    """The package names of docker/proxy-packages.txt (comments and blank lines skipped).

    >>> packages("# x\\nnginx\\n\\nlibssl3  # TLS\\n")
    ['nginx', 'libssl3']
    """
    text = PACKAGES.read_text(encoding="utf-8") if text is None else text
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def release_of(os_release: str) -> str:
    """The Debian codename of an /etc/os-release text ("" when it names none).

    >>> release_of('NAME="Debian GNU/Linux"\\nVERSION_CODENAME=bookworm\\n')
    'bookworm'
    """
    found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", os_release, re.M)
    return found.group(1) if found else ""


_RELEASES: dict[str, str] = {}  # base image id -> its Debian codename, read once per process


def base_release(client, base_image: str) -> str:
    """The Debian codename of ``base_image`` (a throw-away container, no network)."""
    image_id = client.images.get(base_image).id
    if image_id in _RELEASES:
        return _RELEASES[image_id]
    try:
        text = client.containers.run(base_image, ["cat", "/etc/os-release"], network_mode="none", remove=True,
                                     user="65534:65534")
    except docker.errors.ImageNotFound:
        raise DockerUnavailable(f"base image {base_image} is not present: build the offline one with `make docker-base`") from None
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(f"cannot read the Debian release of {base_image}: {exc}") from None
    _RELEASES[image_id] = release_of(text.decode("utf-8", "replace"))
    return _RELEASES[image_id]


def fetch_debs(release: str, dest_root: Path = DEB_CACHE, say: Callable[[str], None] = print) -> list[Path]:
    """The .deb file of every listed package for ``release`` (the host's), downloaded once; their paths."""
    host = release_of(Path("/etc/os-release").read_text(encoding="utf-8")) if Path("/etc/os-release").exists() else ""
    if host != release:
        raise DockerUnavailable(f"the proxy image installs Debian packages downloaded on this host ({host or 'not Debian'}), "
                                f"but the base image is Debian {release or '(unknown)'}: pass a base image of the host's "
                                "release (`make docker-base` builds spider-scoring-base:bookworm), or build on a Debian "
                                f"{release or 'bookworm'} host")
    dest = dest_root / release
    dest.mkdir(parents=True, exist_ok=True)
    wanted = packages()
    missing = [name for name in wanted if not list(dest.glob(f"{name}_*.deb"))]
    if missing:
        if shutil.which("apt-get") is None:
            raise DockerUnavailable(f"the proxy image needs Debian's packages {', '.join(missing)}: no apt-get here "
                                    f"to download them into {dest}")
        say(f"downloading {', '.join(missing)} into {dest} (apt-get download, checked against Debian's archive)")
        _download(missing, dest)
    found = [sorted(dest.glob(f"{name}_*.deb")) for name in wanted]
    if any(len(files) != 1 for files in found):
        raise DockerUnavailable(f"{dest} must hold exactly one .deb per package of {PACKAGES.name}: remove the folder "
                                "and build again")
    return [files[0] for files in found]


def _download(names: list[str], dest: Path) -> None:
    """``apt-get download`` into a folder of its own, then each file renamed into ``dest``: two
    builds at once (parallel tests) never see a half-written file."""
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=dest.parent))
    try:
        done = subprocess.run(["apt-get", "download", "-q", *names], cwd=scratch, capture_output=True, text=True)
        if done.returncode != 0:
            raise DockerUnavailable(f"apt-get download {' '.join(names)} failed:\n{done.stderr.strip()[-1500:]}\n"
                                    "Debian's mirror must be reachable once (run `apt-get update` if the package "
                                    f"lists are missing); later builds use {dest}")
        for deb in scratch.glob("*.deb"):
            os.replace(deb, dest / deb.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def proxy_sources() -> list[Path]:
    """harness/__init__.py and every module of PROXY_PACKAGES: what the image copies."""
    harness = ROOT / "harness"
    return [harness / "__init__.py"] + [p for pkg in PROXY_PACKAGES for p in sorted((harness / pkg).rglob("*.py"))]


def build_context(dest: Path, debs: list[Path]) -> dict[str, bytes]:
    """Write the build context into ``dest``; its files (relative name -> bytes)."""
    files = {"proxy.Dockerfile": DOCKERFILE.read_bytes()}
    files.update({f"debs/{d.name}": d.read_bytes() for d in debs})
    files.update({p.relative_to(ROOT).as_posix(): p.read_bytes() for p in proxy_sources()})
    return write_context(dest, files)


def ensure_image(client, base_image: str = docker_run.DEFAULT_BASE_IMAGE, say: Callable[[str], None] = print) -> str:
    """The proxy image's tag, built on ``base_image`` when not present yet."""
    context = Path(tempfile.mkdtemp(prefix="spider-proxy-image-"))

    def tag_for(base_image_id: str) -> str:
        debs = fetch_debs(base_release(client, base_image), say=say)
        return image_tag(build_context(context, debs), base_image_id, IMAGE_REPO)
    try:
        return docker_run.ensure_built(client, base_image, tag_for, what="proxy", source=DOCKERFILE.name, say=say,
                                       path=str(context), dockerfile="proxy.Dockerfile", network_mode="none")
    finally:
        shutil.rmtree(context, ignore_errors=True)


def proxy_limits(max_batch_bytes: int) -> RunLimits:
    """Memory and tmpfs for nginx and a few whole batches buffered at once; one core's worth of pids.

    >>> proxy_limits(16 * MiB).tmpfs_bytes // MiB, proxy_limits(16 * MiB).mem_bytes // MiB
    (256, 512)
    """
    tmpfs = max(256 * MiB, 16 * max_batch_bytes)
    return RunLimits(mem_bytes=256 * MiB + tmpfs, pids=64, cpus=float(os.cpu_count() or 1), tmpfs_bytes=tmpfs)


def proxy_config(image: str, config_dir: str | os.PathLike, *, name: str, network: str, listen: str = "127.0.0.1",
                 host_port: int = 0, limits: RunLimits | None = None) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create``: the trainer's lockdown, the configuration
    folder read-only, port 8443 published on ``listen`` (``0.0.0.0`` on a public machine).

    >>> cfg = proxy_config("p:1", "/tmp/c", name="p", network="n", host_port=8443)
    >>> cfg["ports"], cfg["read_only"], cfg["user"], cfg["volumes"]["/tmp/c"]["bind"], cfg["command"]
    ({'8443/tcp': ('127.0.0.1', 8443)}, True, '65534:65534', '/etc/spider-proxy', [])
    """
    config = docker_run.run_config(image, [], config_dir, name=name, limits=limits or proxy_limits(16 * MiB))
    del config["network_mode"]
    config["volumes"] = {str(Path(config_dir).resolve()): {"bind": CONFIG_DIR, "mode": "ro"}}
    config["environment"] = {"PYTHONUNBUFFERED": "1", "HOME": "/tmp"}
    config["network"] = network
    config["ports"] = {f"{LISTEN_PORT}/tcp": (listen, host_port or None)}
    config["stop_signal"] = "SIGTERM"  # the entry point asks nginx for a graceful stop
    return config


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def self_signed(cert: Path, key: Path, names: list[str], days: int = 365) -> None:
    """A self-signed certificate for ``names`` (DNS names or IP addresses) into ``cert`` and ``key``
    (key mode 0600); InputError saying what to do when openssl is missing or fails."""
    if shutil.which("openssl") is None:
        raise InputError("no openssl on this machine to make a self-signed certificate: install it, or pass your "
                         "own certificate and key (--cert FILE --key FILE)")
    alt = ",".join(("IP:" if _is_address(n) else "DNS:") + n for n in names)
    for path in (cert, key):
        path.parent.mkdir(parents=True, exist_ok=True)
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", f"/CN={names[0]}",
               "-addext", f"subjectAltName={alt}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise InputError(f"openssl could not make a certificate for {', '.join(names)}: {done.stderr.strip()[-500:]}")
    os.chmod(key, 0o600)
