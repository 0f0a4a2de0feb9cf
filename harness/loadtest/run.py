"""A bounded load test of the grader service, from this process, over loopback.

Two phases over the same server: ``mixed`` (correct, wrong and hostile completions of the eval
rows) and ``mixed+runaway`` (the same, with a query that only the bundle's step budget stops in every
``--runaway-every``-th request). Each request is one HTTP connection from a pool of
``--threads`` client threads. Every answer is checked against the one the same envelope got
alone (``harness.loadtest.workload.calibrate``): a failed request (transport error or non-200) and
a lost or different answer are both counted, and either fails the run. The workers' resident
memory is read from ``/metrics`` every ``--sample-every`` seconds: the run also fails when a
worker that lived through a phase grew more than ``--max-growth-mib``.

Without ``--url`` the server is started for the test (a local process, or the container with
``--docker``) and stopped afterwards. Figures are printed; ``--json PATH`` writes them too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.common.http_client import Endpoint, Reply, parse_prometheus
from harness.common.rows import read_split
from harness.loadtest.workload import Probe, calibrate, load_probes, schedule

MiB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One request of a run."""

    kind: str
    seconds: float
    status: int  # 0: transport error (no HTTP answer at all)
    answer_ok: bool  # the answer is the calibrated one (and the request id came back)
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Route:
    """Where the probes are sent, the body each envelope becomes, and how the answer is read; ``exchange``,
    when set, sends a probe itself (several requests: an ORS episode) and gives the last reply."""

    path: str
    body: Callable[[dict[str, Any]], dict[str, Any]]
    answer: Callable[[dict[str, Any]], tuple[float, str] | None]
    exchange: Callable[[Endpoint, Probe, dict[str, str], float], Reply] | None = None

    def send(self, endpoint: Endpoint, probe: Probe, headers: dict[str, str], timeout: float) -> Reply:
        if self.exchange is not None:
            return self.exchange(endpoint, probe, headers, timeout)
        return endpoint.request("POST", self.path, raw=json.dumps(self.body(probe.envelope)).encode(), headers=headers,
                                timeout=timeout)


def ors_route(indices: dict[str, int]) -> Route:
    """An ORS episode a probe: a session on the probe's eval row (``indices``: row id -> index), its
    answer submitted; the reply is the submit's, its answer read from the stream's ``end`` event."""

    def exchange(endpoint: Endpoint, probe: Probe, headers: dict[str, str], timeout: float) -> Reply:
        opened = endpoint.request("POST", "/create_session", {}, timeout=timeout)
        if opened.status != 200:
            return opened
        sid = opened.text.split("event: task_id\ndata: ", 1)[-1].split("\n", 1)[0]
        index = indices[probe.label.split("/", 1)[0]]
        made = endpoint.request("POST", "/create", {"split": "eval", "index": index}, timeout=timeout,
                                headers={"X-Session-ID": sid})
        if made.status != 200:
            return made
        call = {"name": "submit", "input": {"sql": probe.envelope["output"]}}
        reply = endpoint.request("POST", "/call", call, timeout=timeout, headers={**headers, "X-Session-ID": sid})
        end = reply.text.rsplit("event: end\ndata: ", 1)[-1].strip() if reply.status == 200 else ""
        endpoint.request("POST", "/delete", {}, timeout=timeout, headers={"X-Session-ID": sid})
        return dataclasses.replace(reply, json=json.loads(end) if end else reply.json)

    def answer(body: dict[str, Any]) -> tuple[float, str] | None:
        output = body.get("output") or {}
        reward = output.get("reward")
        return (float(reward), str((output.get("metadata") or {}).get("outcome"))) if reward is not None else None

    return Route("/call", lambda envelope: envelope, answer, exchange)


def _nemo_gym_body(envelope: dict[str, Any]) -> dict[str, Any]:
    """NeMo Gym's ``/verify`` body for an envelope: its task fields and the answer as a Responses object."""
    text = {"type": "output_text", "text": envelope["output"], "annotations": []}
    response = {"id": "resp", "created_at": 0, "model": "load", "object": "response", "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": [],
                "output": [{"type": "message", "id": "msg", "role": "assistant", "status": "completed", "content": [text]}]}
    return {"responses_create_params": {"input": envelope["input"]}, "expected": envelope["expected"], "response": response}


ROUTES = {
    "grade": Route("/grade", lambda envelope: envelope,
                   lambda body: (float(body["score"]), str(body.get("outcome"))) if "score" in body else None),
    "verify": Route("/verify", _nemo_gym_body,
                    lambda body: (float(body["reward"]), str(body.get("spider_outcome")))
                    if "reward" in body and not body.get("mask_sample") else None),
}


def _send(endpoint: Endpoint, probe: Probe, request_id: str, timeout: float, route: Route = ROUTES["grade"]) -> Outcome:
    started = time.monotonic()
    try:
        reply = route.send(endpoint, probe, {"X-Request-Id": request_id}, timeout)
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(probe.kind, time.monotonic() - started, 0, False, f"{type(exc).__name__}: {exc}")
    seconds = time.monotonic() - started
    body = reply.json if isinstance(reply.json, dict) else {}
    answer = route.answer(body)
    ok = reply.status == 200 and answer == probe.expected and reply.headers.get("x-request-id") == request_id
    detail = "" if ok else f"{probe.label}: HTTP {reply.status}, got {answer}, expected {probe.expected}"
    return Outcome(probe.kind, seconds, reply.status, ok, detail)


class MemorySampler:
    """Reads each worker's resident memory from /metrics at an interval, in a thread."""

    def __init__(self, endpoint: Endpoint, every: float) -> None:
        self.endpoint, self.every = endpoint, every
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def sample(self) -> None:
        try:
            text = self.endpoint.request("GET", "/metrics", timeout=10).text
        except (OSError, http.client.HTTPException):
            return  # a missed sample is not a failed request; the next one comes soon
        rss = {k.split('pid="')[1].rstrip('"}'): v for k, v in parse_prometheus(text).items()
               if k.startswith("spider_grader_worker_rss_bytes{")}
        self.samples.append((time.monotonic(), rss))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def memory_summary(samples: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """First and last RSS of each worker seen, and the largest growth of one that lived throughout.

    >>> memory_summary([(0, {"1": 10 * MiB}), (1, {"1": 11 * MiB, "2": 9 * MiB})])["max_growth_mib"]
    1.0
    """
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    peak: dict[str, float] = {}
    for _t, rss in samples:
        for pid, value in rss.items():
            first.setdefault(pid, value)
            last[pid] = value
            peak[pid] = max(peak.get(pid, 0.0), value)
    survivors = [p for p in first if samples and p in samples[0][1] and p in samples[-1][1]]
    growth = max((last[p] - first[p] for p in survivors), default=0.0)
    return {"samples": len(samples), "workers_seen": len(first), "workers_throughout": len(survivors),
            "first_mib": {p: round(v / MiB, 1) for p, v in first.items()},
            "last_mib": {p: round(v / MiB, 1) for p, v in last.items()},
            "peak_mib": round(max(peak.values(), default=0.0) / MiB, 1),
            "max_growth_mib": round(growth / MiB, 2)}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.0
    """
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def latency(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(percentile(ms, 50), 2), "p90_ms": round(percentile(ms, 90), 2),
            "p99_ms": round(percentile(ms, 99), 2), "max_ms": round(max(ms), 2),
            "mean_ms": round(statistics.fmean(ms), 2)}


def run_phase(endpoint: Endpoint, order: list[Probe], threads: int, *, name: str,
              sample_every: float = 1.0, timeout: float = 60.0, route: Route = ROUTES["grade"]) -> dict[str, Any]:
    """Send ``order`` with ``threads`` client threads; figures of the phase."""
    with MemorySampler(endpoint, sample_every) as sampler:
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="load") as pool:
            tag = "".join(c if c.isalnum() else "-" for c in name)  # request ids are [A-Za-z0-9._-]
            results = list(pool.map(lambda item: _send(endpoint, item[1], f"{tag}-{item[0]}", timeout, route),
                                    enumerate(order)))
        elapsed = time.monotonic() - started
    failed = [r for r in results if r.status != 200]
    wrong = [r for r in results if r.status == 200 and not r.answer_ok]
    by_kind = {kind: {"requests": len(group), **latency([r.seconds for r in group])}
               for kind in sorted({r.kind for r in results})
               for group in [[r for r in results if r.kind == kind]]}
    return {"phase": name, "requests": len(results), "threads": threads, "failed": len(failed),
            "wrong_answers": len(wrong), "seconds": round(elapsed, 2),
            "throughput_rps": round(len(results) / elapsed, 1) if elapsed else 0.0,
            **latency([r.seconds for r in results]), "by_kind": by_kind,
            "examples": [r.detail for r in (failed + wrong)[:5]], "memory": memory_summary(sampler.samples)}


def _calibrate_on(endpoint: Endpoint, probes: dict[str, list[Probe]], route: Route = ROUTES["grade"]) -> dict[str, list[Probe]]:
    def grade(probe: Probe) -> tuple[int, Any]:
        reply = route.send(endpoint, probe, {}, 60.0)
        answer = route.answer(reply.json) if isinstance(reply.json, dict) else None
        return reply.status, ({"score": answer[0], "outcome": answer[1]} if answer else reply.json)
    return calibrate(probes, grade)


def run_load(endpoint: Endpoint, eval_path: Path, *, requests: int, threads: int, runaway_every: int,
             max_rows: int | None = None, sample_every: float = 1.0, seed: int = 7, route: str = "grade") -> dict[str, Any]:
    """Calibrate, then the two phases, every request on ``route`` (``grade``, NeMo Gym's ``verify`` or
    an ORS episode, ``ors``); every figure of the run."""
    chosen = ors_route({r.id: i for i, r in enumerate(read_split(eval_path, "eval"))}) if route == "ors" else ROUTES[route]
    health = endpoint.request("GET", "/health", timeout=10).json or {}
    probes = _calibrate_on(endpoint, load_probes(eval_path, max_rows), chosen)
    # Warm every worker (imports, connections, caches) so that memory is compared warm to warm.
    warm = run_phase(endpoint, schedule(probes, max(200, 20 * int(health.get("settings", {}).get("workers", 8))),
                                        0, seed + 1), threads, name="warm-up", sample_every=sample_every, route=chosen)
    phases = [run_phase(endpoint, schedule(probes, requests, 0, seed), threads, name="mixed",
                        sample_every=sample_every, route=chosen)]
    if runaway_every:
        phases.append(run_phase(endpoint, schedule(probes, requests, runaway_every, seed), threads,
                                name="mixed+runaway", sample_every=sample_every, route=chosen))
    metrics = parse_prometheus(endpoint.request("GET", "/metrics", timeout=10).text)
    return {"url": endpoint.url, "route": chosen.path, "bundle_sha256": (health.get("bundle") or {}).get("sha256"),
            "workers": (health.get("settings") or {}).get("workers"),
            "probes": {kind: len(items) for kind, items in probes.items()},
            "runaway_every": runaway_every, "warm_up": {k: warm[k] for k in ("requests", "failed", "wrong_answers")},
            "phases": phases,
            "outcomes": {k.split('"')[1]: int(v) for k, v in metrics.items()
                         if k.startswith("spider_grader_outcomes_total{")},
            "worker_exits": {k.split('"')[1]: int(v) for k, v in metrics.items()
                             if k.startswith("spider_grader_worker_exits_total{")}}


def render(report: dict[str, Any], max_growth_mib: float) -> str:
    """The figures as a readable table."""
    lines = [f"load test on {report['url']}{report.get('route', '/grade')}: {report['workers']} workers, "
             f"bundle {str(report['bundle_sha256'])[:16]}",
             "distinct envelopes: " + ", ".join(f"{k} {v}" for k, v in report["probes"].items()),
             "warm-up: {requests} requests, {failed} failed, {wrong_answers} wrong (not in the figures)".format(**report["warm_up"]),
             ""]
    head = f"{'phase':<15}{'requests':>9}{'failed':>8}{'wrong':>7}{'seconds':>9}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'RSS growth':>12}"
    lines += [head, "-" * len(head)]
    for p in report["phases"]:
        lines.append(f"{p['phase']:<15}{p['requests']:>9}{p['failed']:>8}{p['wrong_answers']:>7}{p['seconds']:>9}"
                     f"{p['throughput_rps']:>8}{p['p50_ms']:>9}{p['p99_ms']:>9}{p['max_ms']:>9}"
                     f"{p['memory']['max_growth_mib']:>9} MiB")
    for p in report["phases"]:
        lines += ["", f"{p['phase']}: latency by kind"]
        for kind, figures in p["by_kind"].items():
            lines.append(f"  {kind:<9}{figures['requests']:>6} requests  p50 {figures['p50_ms']} ms  "
                         f"p99 {figures['p99_ms']} ms  max {figures['max_ms']} ms")
        memory = p["memory"]
        lines.append("  worker RSS (MiB), first -> last sample: " + ", ".join(
            f"{pid}: {memory['first_mib'][pid]} -> {memory['last_mib'][pid]}" for pid in memory["first_mib"]))
        lines.append(f"  {memory['samples']} samples, {memory['workers_seen']} workers seen, peak {memory['peak_mib']} MiB")
        lines += [f"  ! {example}" for example in p["examples"]]
    lines += ["", "outcomes counted by the service: " + ", ".join(f"{k} {v}" for k, v in report["outcomes"].items() if v),
              "workers stopped by the service: " + (", ".join(f"{k} {v}" for k, v in report["worker_exits"].items()) or "none")]
    problems = problems_of(report, max_growth_mib)
    lines.append("verdict: " + ("pass" if not problems else "FAIL: " + "; ".join(problems)))
    return "\n".join(lines)


def problems_of(report: dict[str, Any], max_growth_mib: float) -> list[str]:
    problems = []
    if report["warm_up"]["failed"] or report["warm_up"]["wrong_answers"]:
        problems.append("warm-up: failed requests or wrong answers")
    for p in report["phases"]:
        if p["failed"]:
            problems.append(f"{p['phase']}: {p['failed']} failed requests")
        if p["wrong_answers"]:
            problems.append(f"{p['phase']}: {p['wrong_answers']} lost or different answers")
        if p["memory"]["max_growth_mib"] > max_growth_mib:
            problems.append(f"{p['phase']}: a worker grew {p['memory']['max_growth_mib']} MiB (limit {max_growth_mib})")
    return problems
