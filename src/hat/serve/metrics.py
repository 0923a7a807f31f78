"""Prometheus metrics for ``hat serve`` (``GET /metrics``), through ``prometheus_client``.

Why a registry per app rather than the library's global one: tests (and an embedding process)
create several apps, and the global registry refuses a second metric of the same name. Why
``prometheus_client`` is optional: it is in the ``serve`` extra; without it the app still serves
and ``/metrics`` answers 503 with the install hint, so a missing metrics package never costs
replies.

Label sets are bounded on purpose: a tool name can come from model output (``unknown_tool``
with any name), so tool failures are labelled by status only; hook verdicts are labelled by hook
and point, which come from the harness, not from traffic.

Metrics (all prefixed ``hat_``):

- ``requests_total{endpoint,code}`` - HTTP answers of the reply/stream/reload endpoints;
- ``replies_total{status}`` - agent outcomes: ok, fallback, refused, error;
- ``request_latency_seconds{endpoint}`` - handler entry to reply (queue wait included);
- ``agent_latency_seconds`` / ``queue_wait_seconds`` / ``ttft_seconds`` - their parts;
- ``rounds`` - model rounds per request;
- ``tool_calls_total{status}`` and ``tool_errors_total{status}`` (error, timeout, unknown_tool,
  invalid_args, blocked);
- ``hook_verdicts_total{point,hook,verdict}`` - every non-allow verdict (``block``, ``retry``,
  ``rewrite``); ``hook_blocks_total`` counts block + retry, the ones that cost a reply or a round;
- ``rejected_total{reason}`` - overloaded (429), timeout (504), too_large (413), body_timeout
  (408), invalid (4xx);
- ``cancelled_total{endpoint,stage}`` - requests whose client went away before the answer,
  ``stage`` ``queued`` (it never ran) or ``running`` (its worker stopped at its next model call);
- ``running`` / ``queued`` - gauges read from the admission control at scrape time;
- ``harness_info{name,version,hash}`` (1 for the current version), ``harness_reloads_total{result}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hat.harness.trace import Trace

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 8.0, 10.0, 15.0, 30.0, 60.0)
_ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 12)


class Metrics:
    """All serving metrics of one app. Every method is a no-op when prometheus_client is missing."""

    def __init__(self, running: Callable[[], int], queued: Callable[[], int]) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            self.enabled = False
            return
        self.enabled = True
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        self._build(prom, self.registry)
        self._gauge("running", "Requests running on a worker.", running)
        self._gauge("queued", "Requests admitted and waiting for a worker.", queued)
        self._harness_labels: tuple[str, str, str] | None = None

    def _build(self, prom: Any, reg: Any) -> None:
        self.requests = prom.Counter(
            "hat_requests", "HTTP answers by endpoint and code.", ["endpoint", "code"], registry=reg
        )
        self.replies = prom.Counter("hat_replies", "Agent outcomes by status.", ["status"], registry=reg)
        self.latency = prom.Histogram(
            "hat_request_latency_seconds",
            "Handler entry to reply.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.agent_latency = prom.Histogram(
            "hat_agent_latency_seconds", "Agent wall time.", buckets=_LATENCY_BUCKETS, registry=reg
        )
        self.queue_wait = prom.Histogram(
            "hat_queue_wait_seconds", "Wait for a worker slot.", buckets=_LATENCY_BUCKETS, registry=reg
        )
        self.ttft = prom.Histogram(
            "hat_ttft_seconds", "Handler entry to first reply delta (stream).", buckets=_LATENCY_BUCKETS, registry=reg
        )
        self.rounds = prom.Histogram("hat_rounds", "Model rounds per request.", buckets=_ROUND_BUCKETS, registry=reg)
        self.tool_calls = prom.Counter("hat_tool_calls", "Tool calls by status.", ["status"], registry=reg)
        self.tool_errors = prom.Counter("hat_tool_errors", "Failed tool calls by status.", ["status"], registry=reg)
        self.hook_verdicts = prom.Counter(
            "hat_hook_verdicts", "Non-allow hook verdicts.", ["point", "hook", "verdict"], registry=reg
        )
        self.hook_blocks = prom.Counter("hat_hook_blocks", "Hook verdicts block or retry.", registry=reg)
        self.rejected = prom.Counter("hat_rejected", "Requests refused before a reply.", ["reason"], registry=reg)
        self.cancelled = prom.Counter(
            "hat_cancelled", "Requests cancelled because the client left.", ["endpoint", "stage"], registry=reg
        )
        self.harness_info = prom.Gauge(
            "hat_harness_info", "1 for the harness version now serving.", ["name", "version", "hash"], registry=reg
        )
        self.reloads = prom.Counter("hat_harness_reloads", "Reload attempts by result.", ["result"], registry=reg)

    def _gauge(self, name: str, doc: str, read: Callable[[], int]) -> None:
        gauge = self._prom.Gauge(f"hat_{name}", doc, registry=self.registry)
        gauge.set_function(lambda: float(read()))

    # -- recording ---------------------------------------------------------------------------------
    def http(self, endpoint: str, code: int) -> None:
        if self.enabled:
            self.requests.labels(endpoint, str(code)).inc()

    def reject(self, reason: str) -> None:
        if self.enabled:
            self.rejected.labels(reason).inc()

    def cancel(self, endpoint: str, stage: str) -> None:
        if self.enabled:
            self.cancelled.labels(endpoint, stage).inc()

    def reply(self, endpoint: str, trace: Trace, total_s: float, queue_s: float, ttft_s: float | None = None) -> None:
        """Record one finished request from its trace."""
        if not self.enabled:
            return
        self.replies.labels(trace.status).inc()
        self.latency.labels(endpoint).observe(total_s)
        self.agent_latency.observe(trace.latency_ms / 1000)
        self.queue_wait.observe(queue_s)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        self.rounds.observe(len(trace.rounds))
        for call in trace.tool_calls:
            self.tool_calls.labels(call.status).inc()
            if call.status != "ok":
                self.tool_errors.labels(call.status).inc()
        for event in trace.hook_events:
            self.hook_verdicts.labels(event.point, event.hook, event.verdict).inc()
            if event.verdict in ("block", "retry"):
                self.hook_blocks.inc()

    def harness(self, name: str, version: str, digest: str) -> None:
        """Point ``harness_info`` at the version now serving (the previous series is removed)."""
        if not self.enabled:
            return
        labels = (name, version, digest[:12])
        if self._harness_labels is not None and self._harness_labels != labels:
            self.harness_info.remove(*self._harness_labels)
        self.harness_info.labels(*labels).set(1)
        self._harness_labels = labels

    def reload(self, result: str) -> None:
        if self.enabled:
            self.reloads.labels(result).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return self._prom.generate_latest(self.registry), self._prom.CONTENT_TYPE_LATEST
