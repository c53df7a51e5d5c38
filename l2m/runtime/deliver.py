"""``l2m deliver``: the metrics topic → every configured Prometheus remote-write endpoint
(SPEC §8, docs/prometheus.md).

Input: the job configuration — the metrics side's Kafka settings (``kafka`` with
``sink_kafka``), ``topics.metrics`` and ``remote_write``. Output: remote-write requests
(:mod:`l2m.remotewrite.outbox`: stamped by l2m's time-stamping policy, one tenant each) and,
per endpoint, the offsets of the consumer group ``<group_id>-<endpoint>``, committed once
every request of a poll has had its final answer — sent, or refused for good (a 4xx but
429: never sent again as it was, but split in halves down to the samples refused alone,
since Prometheus refuses a whole request for one bad sample; those are counted per reason
and tenant). A crash or kill -9 re-reads at most the
uncommitted poll and re-sends its samples identically: same timestamps, same values, which a
receiver accepts again.

It runs beside the aggregation, not inside it: a receiver that is slow, down or refusing
holds back only its own endpoint — its requests are retried with backoff for as long as the
outage lasts (spec 1.0) — never ``l2m run`` nor the other endpoints (one thread and one
consumer each). Partitions are assigned, not subscribed (no group rebalancing; the group
only keeps the offsets): run one ``l2m deliver`` per configuration.

With ``monitoring.port`` in the job file it serves ``/metrics``, ``/healthz`` and ``/readyz``
as ``l2m run`` does (:mod:`l2m.runtime.endpoint`; the metrics:
:mod:`l2m.runtime.delivermetrics`)."""

from __future__ import annotations

import base64
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from l2m.config.job import JobConfig, RemoteWriteEndpoint
from l2m.errors import ConfigError
from l2m.remotewrite.client import Endpoint, Sender
from l2m.remotewrite.encode import Metadata
from l2m.remotewrite.outbox import (
    MARK_HEADER,
    Outbox,
    Route,
    Tally,
    metadata,
    settle,
    splittable,
    summary,
)
from l2m.rules.model import Rule
from l2m.runtime.delivermetrics import DeliveryTelemetry
from l2m.runtime.endpoint import Endpoint as MonitoringEndpoint

POLL_RECORDS = 10_000  # records per poll: a poll's samples are sent before its offsets commit
PROGRESS_S = 10.0  # a progress line per endpoint at most this often, when something changed
# While a request is retried the lag is refreshed at most this often (each poll refreshes it).
LAG_REFRESH_S = 1.0
# A partition's end asked of the broker, when the consumer has fetched none yet: at most this.
WATERMARK_TIMEOUT_S = 5.0
# An endpoint's loop that has not moved for this long (plus twice its request timeout: one
# attempt may take that) is stuck: /healthz says so.
STALL_S = 60.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def endpoint_name(cfg: RemoteWriteEndpoint) -> str:
    """The endpoint's name: as configured, else its URL's host and port."""
    if cfg.name:
        return cfg.name
    parsed = urllib.parse.urlsplit(cfg.url)
    return parsed.netloc or cfg.url


def _secret(what: str, file: str | None, env: str | None, name: str) -> str | None:
    if file is not None:
        try:
            return Path(file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"remote_write endpoint {name}: {what} file {file}: cannot "
                              f"read ({exc.strerror})") from None
    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise ConfigError(f"remote_write endpoint {name}: {what} environment variable "
                              f"{env} is not set")
        return value
    return None


def client_endpoint(cfg: RemoteWriteEndpoint) -> Endpoint:
    """The client's :class:`~l2m.remotewrite.client.Endpoint`, its credentials read now from
    their file or environment variable (a :class:`ConfigError` naming what is missing)."""
    name = endpoint_name(cfg)
    if not cfg.url:
        raise ConfigError(f"remote_write endpoint {name}: url is required")
    headers = dict(cfg.headers)
    token = _secret("bearer token", cfg.bearer_token_file, cfg.bearer_token_env, name)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if cfg.basic_auth is not None:
        password = _secret("password", cfg.basic_auth.password_file,
                           cfg.basic_auth.password_env, name) or ""
        pair = f"{cfg.basic_auth.username}:{password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    return Endpoint(cfg.url, headers, cfg.tenant_header, cfg.timeout_ms / 1000,
                    cfg.tls.ca_file, cfg.tls.cert_file, cfg.tls.key_file,
                    cfg.tls.insecure_skip_verify)


def route(cfg: RemoteWriteEndpoint) -> Route:
    return Route(frozenset(cfg.accounts) if cfg.accounts else None, dict(cfg.tenants),
                 cfg.default_tenant, cfg.tenant_header is not None)


@dataclass
class EndpointDelivery:
    """One endpoint's loop: its consumer, sender and tally."""

    job: JobConfig
    cfg: RemoteWriteEndpoint
    stop: threading.Event
    once_idle_s: float | None = None  # once: end after the topic gave nothing this long
    families: dict[str, Metadata] | None = None  # the rules' metadata by rule id
    log: Callable[[str], None] = _stderr

    def __post_init__(self) -> None:
        self.name = endpoint_name(self.cfg)
        self.tally = Tally()
        self.sender = Sender(client_endpoint(self.cfg), stop=self.stop.is_set,
                             on_retry=self._retried)
        self.error: BaseException | None = None
        self.ready = False  # reading the topic
        self._running = False
        self._beat = time.monotonic()
        self._stall_s = STALL_S + 2 * self.cfg.timeout_ms / 1000
        self._live: Any = None  # the consumer, while the loop runs (in its thread only)
        self._partitions: list[int] = []
        self._committed: dict[int, int] = {}  # per partition: the next offset to deliver
        self._ends: dict[int, int] = {}  # per partition: the last end (high watermark) seen
        self._lag_at = 0.0

    def healthy(self) -> bool:
        """No failure, and the loop moved recently (a poll, an answer, a retry)."""
        if self.error is not None:
            return False
        return not self._running or time.monotonic() - self._beat < self._stall_s

    def _consumer(self) -> Any:
        from confluent_kafka import OFFSET_STORED, Consumer, TopicPartition

        group = f"{self.job.remote_write.group_id}-{self.name}"
        consumer = Consumer({**self.job.sink, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "log_level": "3"})
        topic = self.job.topics.metrics
        found = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            consumer.close()
            raise ConfigError(f"remote_write: metrics topic {topic} not found")
        self._partitions = sorted(found.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_STORED) for p in self._partitions])
        # Where delivery resumes: the group's offsets, else (auto.offset.reset: earliest)
        # each partition's start.
        for tp in consumer.committed([TopicPartition(topic, p) for p in self._partitions],
                                     timeout=30):
            self._committed[tp.partition] = tp.offset if tp.offset >= 0 else \
                consumer.get_watermark_offsets(tp, timeout=30)[0]
        return consumer

    def _retried(self) -> None:
        self.tally.retried()
        self._beat = time.monotonic()
        # A receiver that is down keeps the loop in one poll: the lag must still move.
        if self._live is not None and time.monotonic() - self._lag_at >= LAG_REFRESH_S:
            self._refresh_lag()

    def _refresh_lag(self) -> None:
        """The lag: each partition's end minus what this endpoint committed. The end is the
        high watermark of the consumer's latest fetch (kept by librdkafka: no request), or,
        before its first fetch, asked of the broker (ListOffsets, which the embedded broker,
        tansu, answers short of its newest record batch's tail). A receiver that is down
        stops the consumer's fetches once its queue is full, and with them the end: the lag
        is approximate, at most short of the truth."""
        from confluent_kafka import KafkaException, TopicPartition

        topic = self.job.topics.metrics
        for p in self._partitions:
            tp = TopicPartition(topic, p)
            try:
                end = self._live.get_watermark_offsets(tp, cached=True)[1]
                if end < 0:
                    end = self._live.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S)[1]
            except KafkaException:
                continue  # Kafka unreachable for now: the last end seen stands
            if end >= 0:
                self._ends[p] = end
        self.tally.set_lag(sum(max(0, end - self._committed.get(p, 0))
                               for p, end in self._ends.items()))
        self._lag_at = time.monotonic()

    def run(self) -> None:
        self._beat = time.monotonic()
        self._running = True
        try:
            self._run()
        except BaseException as exc:  # reported by the caller, which stops the others
            self.error = exc
            self.stop.set()
        finally:
            self._running = False
            self.ready = False

    def _run(self) -> None:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, TopicPartition

        consumer = self._consumer()
        outbox = Outbox(route(self.cfg), self.cfg.max_samples_per_send, self.tally,
                        self.families)
        topic = self.job.topics.metrics
        poll_s = self.job.remote_write.poll_ms / 1000
        idle_since = time.monotonic()
        reported, last_report = "", time.monotonic()
        self._live = consumer
        self._refresh_lag()
        self.ready = True
        try:
            while not self.stop.is_set():
                self._beat = time.monotonic()
                records = consumer.consume(POLL_RECORDS, timeout=poll_s)
                positions: dict[int, int] = {}
                for record in records:
                    error = record.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            self.log(f"l2m deliver: {self.name}: {error.str()}")
                        continue
                    kind, at = record.timestamp()
                    mark = next((v.decode() for k, v in record.headers() or ()
                                 if k == MARK_HEADER and v is not None), None)
                    outbox.add(record.value(), None if kind == TIMESTAMP_NOT_AVAILABLE else at,
                               mark)
                    positions[record.partition()] = record.offset() + 1
                pending = outbox.requests()
                while pending:
                    request = pending.pop(0)
                    answer = self.sender.send(request.body, request.tenant)
                    if answer.status == 0:  # stopped while retrying: nothing committed
                        return
                    self.tally.answered(answer.status, time.time())
                    self._beat = time.monotonic()
                    if splittable(request, answer.status):
                        pending[:0] = request.halves()
                        continue
                    settle(self.tally, request, answer.status, answer.reason)
                if positions:
                    consumer.commit(offsets=[TopicPartition(topic, p, o)
                                             for p, o in sorted(positions.items())],
                                    asynchronous=False)
                    self._committed.update(positions)
                    idle_since = time.monotonic()
                self._refresh_lag()
                if not positions and self.once_idle_s is not None and \
                        time.monotonic() - idle_since >= self.once_idle_s:
                    return
                line = summary(self.tally)
                if line != reported and time.monotonic() - last_report >= PROGRESS_S:
                    self.log(f"l2m deliver: {self.name}: {line}")
                    reported, last_report = line, time.monotonic()
        finally:
            self._live = None
            consumer.close()
            self.sender.close()


def deliver(job: JobConfig, once: bool = False, stop: threading.Event | None = None,
            once_idle_s: float = 3.0, rules: Iterable[Rule] = ()) -> dict[str, Tally]:
    """Deliver until ``stop`` is set (or, ``once``, until the topic has given nothing for
    ``once_idle_s`` on every endpoint); each endpoint's tally by name. ``rules``: the job's,
    whose metadata (TYPE, HELP, UNIT) goes with their samples. An endpoint's failure (not a
    receiver's answer: those are counted) stops the others and is raised. With
    ``monitoring.port`` set, ``/metrics``, ``/healthz`` and ``/readyz`` are served meanwhile
    (a :class:`ConfigError` if the port cannot be listened on)."""
    if not job.remote_write.endpoints:
        raise ConfigError("remote_write: no endpoints configured (remote_write.endpoints "
                          "in the configuration file; docs/prometheus.md)")
    stop = stop or threading.Event()
    families = metadata(rules)
    loops = [EndpointDelivery(job, cfg, stop, once_idle_s if once else None, families=families)
             for cfg in job.remote_write.endpoints]
    names = [loop.name for loop in loops]
    shared = sorted({n for n in names if names.count(n) > 1})
    if shared:
        raise ConfigError(f"remote_write: endpoints share the name {', '.join(shared)}; give "
                          "each its own name")
    telemetry, server = None, None
    if job.monitoring.port is not None:
        telemetry = DeliveryTelemetry(loops, job.monitoring.top_accounts)
        # Before the consumers start: probes get answers (not ready yet) meanwhile.
        server = MonitoringEndpoint(telemetry, job.monitoring.host, job.monitoring.port)
        _stderr(f"l2m deliver: metrics on {job.monitoring.host}:{server.port}/metrics")
    threads = [threading.Thread(target=loop.run, name=f"l2m-deliver-{loop.name}", daemon=True)
               for loop in loops]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    finally:
        if telemetry is not None:
            telemetry.stopping = True
        if server is not None:
            server.close()
    for loop in loops:
        loop.log(f"l2m deliver: {loop.name}: {summary(loop.tally)}")
    failed = next((loop.error for loop in loops if loop.error is not None), None)
    if failed is not None:
        raise failed
    return {loop.name: loop.tally for loop in loops}
