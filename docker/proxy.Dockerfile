# The grader service's reverse proxy: nginx from Debian's packages, in front of the service image
# (harness/containers/public.py starts both). Built by `python3 -m harness proxy-image` from a
# context it assembles: this file, the .deb files of docker/proxy-packages.txt (downloaded on the
# host with `apt-get download`, which checks them against Debian's signed archive; cached in
# .cache/proxy-debs/), and the harness packages the entry point imports (harness/common/,
# harness/proxy/). The build needs no network.
#
# The base must be the Debian release the host downloaded the packages for (bookworm here: the
# offline spider-scoring-base:bookworm, or python:3.11-slim-bookworm); harness/containers/proxy.py
# checks that before building.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

COPY debs/ /opt/proxy/debs/
# policy-rc.d: the packages' scripts must not try to start nginx during the build. The default
# site is removed: nginx runs only the configuration harness/proxy/nginx_conf.py writes.
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
    && DEBIAN_FRONTEND=noninteractive dpkg -i /opt/proxy/debs/*.deb \
    && rm -rf /opt/proxy/debs /usr/sbin/policy-rc.d /etc/nginx/sites-enabled/default \
    && nginx -v

COPY harness/ /opt/proxy/app/harness/
# Compiled once here: at run time the filesystem is read-only and no .pyc can be written.
RUN python3 -m compileall -q /opt/proxy/app

ENV PYTHONPATH=/opt/proxy/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8 \
    HOME=/tmp

# "nobody": nginx's master runs unprivileged and listens on 8443 (no capability needed).
USER 65534:65534
WORKDIR /
EXPOSE 8443
ENTRYPOINT ["python3", "-m", "harness.proxy.main"]
