"""Who may have what: one table of requests and whether the token lets them through, run against
the service alone (tests/test_service_auth.py) and through the proxy (tests/test_proxy_docker.py),
so that both apply the same rules."""

from __future__ import annotations

RIGHT, WRONG = "right", "wrong"

# (id, method, path with {token} where a path token goes, Authorization header or None, let through?)
CASES = [
    ("grade with no token", "POST", "/grade", None, False),
    ("grade with the header", "POST", "/grade", f"Bearer {{{RIGHT}}}", True),
    ("grade with the header, scheme in lower case", "POST", "/grade", f"bearer {{{RIGHT}}}", True),
    ("grade with a wrong header", "POST", "/grade", f"Bearer {{{WRONG}}}", False),
    ("grade with another scheme", "POST", "/grade", f"Basic {{{RIGHT}}}", False),
    ("grade with the path token", "POST", f"/t/{{{RIGHT}}}/grade", None, True),
    ("the root path with the path token", "POST", f"/t/{{{RIGHT}}}", None, True),
    ("grade with a wrong path token", "POST", f"/t/{{{WRONG}}}/grade", None, False),
    ("a wrong path token beats a right header", "POST", f"/t/{{{WRONG}}}/grade", f"Bearer {{{RIGHT}}}", False),
    ("an empty path token", "POST", "/t//grade", None, False),
    ("batch with no token", "POST", "/grade/batch", None, False),
    ("batch with the path token", "POST", f"/t/{{{RIGHT}}}/grade/batch", None, True),
    ("metrics with no token", "GET", "/metrics", None, False),
    ("metrics with the path token", "GET", f"/t/{{{RIGHT}}}/metrics", None, True),
    ("an unknown path with no token", "GET", "/nowhere", None, False),
    ("health, open", "GET", "/health", None, True),
    ("readiness, open", "GET", "/readyz", None, True),
    ("liveness, open", "GET", "/livez", None, True),
    ("health under a wrong path token", "GET", f"/t/{{{WRONG}}}/health", None, False),
]


def fill(text: str | None, right: str, wrong: str) -> str | None:
    return None if text is None else text.replace("{" + RIGHT + "}", right).replace("{" + WRONG + "}", wrong)
