# The grader service (`http:URL` graders): harness/service/server.py, gunicorn sync workers serving
# a bundle zip's grader. Built by `make service-image` (python3 -m harness service-image), which
# assembles the build context: this file, the pinned wheels (downloaded on the host, see
# docker/service-requirements.txt), the stdlib installer docker/service-install-wheels.py and the
# harness modules the service imports. The build needs no network and no pip in the image.
#
# BASE_IMAGE defaults to the public python:3.11-slim. Where Docker Hub is not reachable, build the
# offline Debian base first (`make docker-base`) and pass
# --build-arg BASE_IMAGE=spider-scoring-base:bookworm (what `make service-image` does here).
#
# Run it the way harness/containers/service.py does: read-only root filesystem, the bundle zip mounted
# read-only at /opt/spider/bundle.zip, a small tmpfs on /tmp (the unpacked bundle, the metric
# files), no capabilities, no new privileges, memory and pids limits, port 8000 published on
# 127.0.0.1 only.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

COPY service-requirements.txt service-install-wheels.py /opt/grader/build/
COPY wheels/ /opt/grader/build/wheels/
RUN python3 /opt/grader/build/service-install-wheels.py /opt/grader/build/service-requirements.txt \
        /opt/grader/build/wheels /opt/grader/site-packages \
    && rm -rf /opt/grader/build

COPY harness/ /opt/grader/app/harness/
# Compiled once here: at run time the filesystem is read-only and no .pyc can be written.
RUN python3 -m compileall -q /opt/grader/site-packages /opt/grader/app

ENV PYTHONPATH=/opt/grader/site-packages:/opt/grader/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8 \
    HOME=/tmp

# "nobody": the service never runs as root, whatever the run options say.
USER 65534:65534
WORKDIR /
EXPOSE 8000
ENTRYPOINT ["python3", "-m", "harness.service.server"]
CMD ["--zip", "/opt/spider/bundle.zip", "--bind", "0.0.0.0:8000", "--metrics-dir", "/tmp/metrics", \
     "--workdir", "/tmp", "--worker-tmp-dir", "/tmp"]
