"""``l2m load``'s producing side: realistic logs into any Kafka topic at a steady rate, spread
over its partitions by a skew, each stamped with the moment it was produced.

Input: a :class:`LoadSpec` (client settings as a job's ``kafka:`` section, topic, rate,
duration or number of logs, skew, log shape, producer processes). Output: the logs on the
topic, and a :class:`LoadSummary` — logs sent, achieved rate, per-partition counts and a
``timeline`` of (wall time, logs sent so far) that maps the N-th log back to when it was
produced (:func:`l2m.dev.loadwatch.produced_at`: what latency and lag are measured with).

Every log's ``@timestamp`` is its production time (ms; a late one older by the generator's
1–30 minutes), so a counter sample's ``timestamp`` — the newest event time it counted — is the
production time of its newest log. The pace is held with tokens on short ticks (a few ms,
never a second's worth at once); several processes share the rate when one cannot keep it."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.dev.skew import Skew, schedule
from l2m.errors import ConfigError, KafkaUnavailableError, L2mError

# Ticks: at least MIN_TICK_S between two batches (a batch is what fell due meanwhile: 100
# logs at 20,000/s), at most MAX_TICK_S asleep (reports stay on time at low rates).
MIN_TICK_S = 0.005
MAX_TICK_S = 0.05
# A worker's (wall time, sent) points: the timeline's resolution (between two, the watcher
# interpolates), small enough for a day's run (350,000 points a process).
REPORT_S = 0.25
# Behind the pace (a pause, a full queue), at most this much of a second's logs per batch.
CATCH_UP_S = 0.1
# The interleaved partition order is this long (or 100 per partition): any 1,000 logs in a
# row follow the skew to 0.1%.
SCHEDULE_LENGTH = 1000
# Producer settings for a steady, low-latency stream; the user's settings win.
# librdkafka's own log stays off (log_level 0): it repeats a refused connection 20 times a
# second on stderr; what fails reaches the user as one line of ours.
PRODUCER_DEFAULTS = {"linger.ms": "5", "batch.num.messages": "10000",
                     "queue.buffering.max.messages": "1000000", "log_level": "0"}
# Event-time spacing the generator adds to each log: nothing (we stamp the wall clock).
_NO_SPACING = 1e12


@dataclass(frozen=True)
class LoadSpec:
    """What to produce. ``kafka``: librdkafka client settings (bootstrap.servers, security,
    SASL, TLS files), as a job file's ``kafka:`` section. ``duration_s`` or ``logs`` ends the
    run (``logs`` wins; with a duration, rate × duration logs are sent). ``partitions``: None
    for the topic's own count."""

    kafka: Mapping[str, str]
    topic: str
    rate: float
    duration_s: float | None = None
    logs: int | None = None
    skew: Skew = field(default_factory=Skew)
    partitions: int | None = None
    accounts: int = 0
    late_share: float = 0.0
    malformed_share: float = 0.0
    processes: int = 1
    seed: int = 7

    @property
    def total(self) -> int:
        """Logs the run sends."""
        if self.logs is not None:
            return self.logs
        return max(1, round(self.rate * (self.duration_s or 0.0)))


@dataclass(frozen=True)
class Progress:
    """A progress report: ``seconds`` since the start, logs ``sent``, the target rate, the
    rate achieved since the previous report and since the start."""

    seconds: float
    sent: int
    target_rate: float
    rate: float
    overall_rate: float


@dataclass
class LoadSummary:
    """What a run did. ``started``: wall time (s since the epoch) of the first log;
    ``timeline``: (wall time s, logs sent so far), a point at least every 0.5 s, the first
    (started, 0); ``failed``: logs Kafka did not take (not counted in ``sent``)."""

    topic: str
    target_rate: float
    partitions: int
    processes: int
    skew: Skew
    started: float
    seconds: float
    sent: int
    failed: int
    partition_counts: list[int]
    timeline: list[tuple[float, int]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Achieved logs per second."""
        return self.sent / self.seconds if self.seconds > 0 else 0.0


@dataclass
class WorkerResult:
    """One producing worker's account of its share."""

    worker: int
    sent: int
    failed: int
    counts: list[int]
    timeline: list[tuple[float, int]]


Report = Callable[[int, float, int], None]  # (worker, wall time, sent so far)


def produce_share(spec: LoadSpec, worker: int, rate: float, logs: int, partitions: int,
                  producer: Any, report: Report | None = None,
                  clock: Callable[[], float] = time.time,
                  sleep: Callable[[float], None] = time.sleep,
                  monotonic: Callable[[], float] | None = None) -> WorkerResult:
    """Produce ``logs`` logs at ``rate`` per second with ``producer`` (a confluent_kafka
    Producer's ``produce``/``poll``/``flush``), stamping each with ``clock()``'s time: the k-th
    is due k/rate after the start, what fell due is sent every few ms. Partitions follow the
    spec's skew, interleaved (:func:`~l2m.dev.skew.schedule`), each worker from its own point
    of the cycle. ``report``: (worker, time, sent) every :data:`REPORT_S`. The pace follows
    ``monotonic`` (default time.monotonic; with a fake ``clock``, that clock): a wall clock
    set back or forward stamps the logs, it does not stall or burst them."""
    pace = monotonic or (time.monotonic if clock is time.time else clock)
    failures = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures[0] += 1

    gen = LogGenerator(GeneratorConfig(
        seed=spec.seed * 1009 + worker, rate_per_s=_NO_SPACING, late_ratio=spec.late_share,
        malformed_ratio=spec.malformed_share, accounts=spec.accounts))
    order = schedule(spec.skew.weights(partitions), max(SCHEDULE_LENGTH, 100 * partitions))
    slot = (worker * len(order)) // max(1, spec.processes) % len(order)
    counts = [0] * partitions
    topic, send, poll = spec.topic, producer.produce, producer.poll
    burst = max(1, int(rate * CATCH_UP_S))
    start = pace()
    timeline = [(clock(), 0)]
    next_report = start + REPORT_S
    sent = 0
    while sent < logs:
        now = pace()
        due = max(0, min(logs, int((now - start) * rate) + 1, sent + burst) - sent)
        for _ in range(due):
            gen.clock = clock() * 1000.0
            partition = order[slot]
            slot = slot + 1 if slot + 1 < len(order) else 0
            line = gen.next_line()
            while True:
                try:
                    send(topic, value=line, partition=partition, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: deliveries drain it
                    poll(0.05)
            counts[partition] += 1
        sent += due
        poll(0)
        now = pace()
        if now >= next_report or sent >= logs:
            wall = clock()
            timeline.append((wall, sent))
            if report is not None:
                report(worker, wall, sent)
            next_report = now + REPORT_S
        if sent < logs:
            wait = start + sent / rate - now
            if wait > 0:
                sleep(min(max(wait, MIN_TICK_S), MAX_TICK_S))
    # Still queued after a minute: not delivered either (flush answers how many).
    undelivered = producer.flush(60)
    failed = failures[0] + (undelivered if isinstance(undelivered, int) else 0)
    return WorkerResult(worker, sent - failed, failed, counts, timeline)


def producer_config(kafka: Mapping[str, str]) -> dict[str, str]:
    """The producer settings: :data:`PRODUCER_DEFAULTS`, then the user's."""
    return {**PRODUCER_DEFAULTS, **kafka}


def masked(text: str, kafka: Mapping[str, Any]) -> str:
    """``text`` with every setting's value but the bootstrap servers masked: librdkafka
    quotes an invalid value, and a job's settings hold passwords."""
    for key, value in kafka.items():
        if key != "bootstrap.servers" and len(str(value)) >= 3:
            text = text.replace(str(value), "***")
    return text


def _new_producer(kafka: Mapping[str, str]) -> Any:
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(producer_config(kafka))
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"kafka client settings: {masked(_reason(exc), kafka)}") from None


def topic_partitions(producer: Any, spec: LoadSpec, timeout: float = 15.0) -> int:
    """The topic's partition count, from the cluster's metadata: a :class:`ConfigError` when
    the topic is missing or has fewer than ``spec.partitions``."""
    from confluent_kafka import KafkaException

    bootstrap = spec.kafka.get("bootstrap.servers", "?")
    try:
        meta = producer.list_topics(topic=spec.topic, timeout=timeout)
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"no answer from Kafka at {bootstrap} within {timeout:g} s: "
            f"{masked(_reason(exc), spec.kafka)}") from None
    info = meta.topics.get(spec.topic)
    if info is None or info.error is not None or not info.partitions:
        raise ConfigError(f"topic '{spec.topic}' does not exist on {bootstrap}")
    count = len(info.partitions)
    if spec.partitions is not None and spec.partitions > count:
        raise ConfigError(f"--partitions {spec.partitions}: topic '{spec.topic}' has "
                          f"{count} partition(s)")
    return spec.partitions or count


def _reason(exc: Exception) -> str:
    """A KafkaException's own words (``Failed to get metadata: …``), not its repr."""
    error = exc.args[0] if exc.args else None
    text = getattr(error, "str", None)
    return str(text()) if callable(text) else str(exc)


def _shares(spec: LoadSpec) -> list[tuple[float, int]]:
    """Each worker's (rate, logs)."""
    n = spec.processes
    total = spec.total
    return [(spec.rate / n, total // n + (1 if w < total % n else 0)) for w in range(n)]


def _process_main(spec: LoadSpec, worker: int, rate: float, logs: int, partitions: int,
                  out: Any, go: Any) -> None:
    """A producer process: ready, wait for the common start, produce, hand back its result.
    Ctrl-C is the parent's to handle (it ends the processes); a parent gone (killed) ends
    this one at its next report, instead of producing on alone."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = mp.parent_process()

    def report(w: int, t: float, n: int) -> None:
        if parent is not None and not parent.is_alive():
            raise SystemExit(0)
        out.put(("sent", w, t, n))

    try:
        producer = _new_producer(spec.kafka)
        with contextlib.suppress(Exception):  # metadata now, not at the first log
            producer.list_topics(topic=spec.topic, timeout=10)
        out.put(("ready", worker))
        go.wait()
        result = produce_share(spec, worker, rate, logs, partitions, producer, report)
        out.put(("done", result))
    except Exception as exc:  # the parent reports it, one line
        out.put(("error", worker, getattr(exc, "code", "L2M"), str(exc)))


def merged_timeline(timelines: list[list[tuple[float, int]]]) -> list[tuple[float, int]]:
    """Several workers' (time, sent) steps → the run's: at each point of any worker, the sum
    of every worker's latest count."""
    points = sorted((t, w, n) for w, line in enumerate(timelines) for t, n in line)
    latest = [0] * len(timelines)
    merged: list[tuple[float, int]] = []
    for t, w, n in points:
        latest[w] = n
        merged.append((t, sum(latest)))
    return merged


def run_load(spec: LoadSpec, progress: Callable[[Progress], None] | None = None,
             progress_every: float = 5.0,
             producer_factory: Callable[[Mapping[str, str]], Any] | None = None
             ) -> LoadSummary:
    """Produce ``spec``'s logs; ``progress`` gets a :class:`Progress` every
    ``progress_every`` seconds. One process: a thread of this one; more: that many producer
    processes (spawned), the rate shared. ``producer_factory``: for tests (one process)."""
    factory = producer_factory or _new_producer
    probe = factory(spec.kafka)
    partitions = spec.partitions if producer_factory is not None and spec.partitions \
        else topic_partitions(probe, spec)
    shares = _shares(spec)
    results: dict[int, WorkerResult] = {}
    workers: list[Any] = []
    messages: Any
    if spec.processes == 1:
        messages = queue.Queue()

        def thread_main() -> None:
            try:
                rate, logs = shares[0]
                messages.put(("done", produce_share(
                    spec, 0, rate, logs, partitions, probe,
                    lambda w, t, n: messages.put(("sent", w, t, n)))))
            except Exception as exc:
                messages.put(("error", 0, getattr(exc, "code", "L2M"), str(exc)))

        start_workers = threading.Thread(target=thread_main, name="l2m-load", daemon=True)
        workers.append(start_workers)
        start_workers.start()
    else:
        ctx = mp.get_context("spawn")
        messages = ctx.Queue()
        go = ctx.Event()
        for w, (rate, logs) in enumerate(shares):
            proc = ctx.Process(target=_process_main, name=f"l2m-load-{w}", daemon=True,
                               args=(spec, w, rate, logs, partitions, messages, go))
            proc.start()
            workers.append(proc)
        ready = 0
        deadline = time.monotonic() + 60
        while ready < len(workers):
            try:
                _check(messages.get(timeout=0.5), results)
                ready += 1
            except queue.Empty:
                _check_alive(workers, results)
                if time.monotonic() > deadline:
                    raise L2mError("the producer processes did not start within 60 s") \
                        from None
        go.set()
    started = time.time()
    sent = [0] * spec.processes
    last_t, last_sent = started, 0
    next_progress = started + progress_every
    try:
        while len(results) < spec.processes:
            try:
                message = messages.get(timeout=0.2)
            except queue.Empty:
                _check_alive(workers, results)
                continue
            _check(message, results)
            if message[0] == "sent":
                sent[message[1]] = message[3]
            now = time.time()
            if progress is not None and now >= next_progress and len(results) < spec.processes:
                total = sum(sent)
                progress(Progress(now - started, total, spec.rate,
                                  (total - last_sent) / max(now - last_t, 1e-9),
                                  total / max(now - started, 1e-9)))
                last_t, last_sent = now, total
                next_progress += progress_every
    finally:
        # Done: the workers are ending (a process flushes, then exits). Interrupted or failed:
        # no more logs — processes are ended at once; a thread dies with this process.
        complete = len(results) == spec.processes
        for worker in workers:
            if complete:
                worker.join(timeout=5)
            if not isinstance(worker, threading.Thread) and worker.is_alive():
                worker.terminate()
                worker.join(timeout=5)
    done = [results[w] for w in sorted(results)]
    timeline = merged_timeline([r.timeline for r in done])
    first = min(r.timeline[0][0] for r in done)
    last = max(r.timeline[-1][0] for r in done)
    counts = [sum(r.counts[p] for r in done) for p in range(partitions)]
    return LoadSummary(topic=spec.topic, target_rate=spec.rate, partitions=partitions,
                       processes=spec.processes, skew=spec.skew, started=first,
                       seconds=last - first, sent=sum(r.sent for r in done),
                       failed=sum(r.failed for r in done), partition_counts=counts,
                       timeline=timeline)


def _check_alive(workers: list[Any], results: dict[int, WorkerResult]) -> None:
    """A producer process gone without its result (killed, or failed to start)."""
    # A worker that ends normally has queued its result or its error first.
    for w, worker in enumerate(workers):
        code = getattr(worker, "exitcode", None)
        if w not in results and code:
            raise L2mError(f"producer process {w} ended with exit code {code}")


def _check(message: tuple[Any, ...], results: dict[int, WorkerResult]) -> None:
    """A worker's message: its result kept, its failure raised."""
    if message[0] == "done":
        results[message[1].worker] = message[1]
    elif message[0] == "error":
        error = L2mError(message[3])
        error.code = message[2]
        raise error
