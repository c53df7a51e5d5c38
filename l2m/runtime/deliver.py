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
only keeps the offsets): run one ``l2m deliver`` per configuration."""

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

POLL_RECORDS = 10_000  # records per poll: a poll's samples are sent before its offsets commit
PROGRESS_S = 10.0  # a progress line per endpoint at most this often, when something changed


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
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    def __post_init__(self) -> None:
        self.name = endpoint_name(self.cfg)
        self.tally = Tally()
        self.sender = Sender(client_endpoint(self.cfg), stop=self.stop.is_set)
        self.error: BaseException | None = None

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
        consumer.assign([TopicPartition(topic, p, OFFSET_STORED) for p in found.partitions])
        return consumer

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the caller, which stops the others
            self.error = exc
            self.stop.set()

    def _run(self) -> None:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, TopicPartition

        consumer = self._consumer()
        outbox = Outbox(route(self.cfg), self.cfg.max_samples_per_send, self.tally,
                        self.families)
        topic = self.job.topics.metrics
        poll_s = self.job.remote_write.poll_ms / 1000
        idle_since = time.monotonic()
        reported, last_report = "", time.monotonic()
        try:
            while not self.stop.is_set():
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
                    if splittable(request, answer.status):
                        pending[:0] = request.halves()
                        continue
                    settle(self.tally, request, answer.status, answer.reason)
                if positions:
                    consumer.commit(offsets=[TopicPartition(topic, p, o)
                                             for p, o in sorted(positions.items())],
                                    asynchronous=False)
                    idle_since = time.monotonic()
                elif self.once_idle_s is not None and \
                        time.monotonic() - idle_since >= self.once_idle_s:
                    return
                line = summary(self.tally)
                if line != reported and time.monotonic() - last_report >= PROGRESS_S:
                    self.log(f"l2m deliver: {self.name}: {line}")
                    reported, last_report = line, time.monotonic()
        finally:
            consumer.close()
            self.sender.close()


def deliver(job: JobConfig, once: bool = False, stop: threading.Event | None = None,
            once_idle_s: float = 3.0, rules: Iterable[Rule] = ()) -> dict[str, Tally]:
    """Deliver until ``stop`` is set (or, ``once``, until the topic has given nothing for
    ``once_idle_s`` on every endpoint); each endpoint's tally by name. ``rules``: the job's,
    whose metadata (TYPE, HELP, UNIT) goes with their samples. An endpoint's failure (not a
    receiver's answer: those are counted) stops the others and is raised."""
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
    threads = [threading.Thread(target=loop.run, name=f"l2m-deliver-{loop.name}", daemon=True)
               for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)
    for loop in loops:
        loop.log(f"l2m deliver: {loop.name}: {summary(loop.tally)}")
    failed = next((loop.error for loop in loops if loop.error is not None), None)
    if failed is not None:
        raise failed
    return {loop.name: loop.tally for loop in loops}
