# The emulated trainer's runtime: a bare Python 3 with the standard library and nothing else, the
# way the trainer runs a bundle (trainer-contract.md: "CPython 3.9+ standard library only").
#
# BASE_IMAGE defaults to the public python:3.11-slim. Where Docker Hub is not reachable, build an
# offline Debian bookworm base first (`make docker-base`, docker/build-base.sh) and pass
# --build-arg BASE_IMAGE=spider-scoring-base:bookworm (what `make image` does by default here).
#
# No code is copied in: the harness's stdlib-only runner, the zip and the splits are bind-mounted
# read-only at /opt/spider when a container starts (harness/containers/trainer.py), so the image changes
# only when this file or the base changes, and is tagged by a hash of both.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# No .pyc next to read-only sources, unbuffered progress, the mounted harness on the path.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/opt/spider \
    LANG=C.UTF-8 \
    HOME=/tmp

# "nobody": the container never runs as root, whatever the run options say.
USER 65534:65534
WORKDIR /
CMD ["python3", "-c", "import sys; print(sys.version)"]
