"""Many reads or writes of one ``transformWithStateInPandas`` map state, pipelined.

Input: a map state of the running processor and the user keys to read (or the entries to
write). Output: each key's value (None when absent), in order; the writes done.

pyspark 4.3's ``MapState.getValue`` and ``updateValue`` each send one request to the JVM's state
server over a socket and wait for its answer: ≈ 55 µs a series (two calls), most of it the round
trips. The server answers requests in order, one at a
time, so a chunk of requests can be written at once and the answers read after: the wait is
paid once per chunk. Chunks stay small (:data:`CHUNK`, :data:`CHUNK_BYTES`), so neither side's
socket buffer fills while the other is not reading.

This speaks pyspark's own wire format through its client's internals (``_mapStateClient``,
pinned by ``pyspark==4.3.*``); where they are not there (another version, the tests' stand-in
state server) it falls back to the public calls, one at a time. Keys and values are pickled as
they are: pyspark's ``_serialize_to_bytes`` first converts each field to Spark's internal form
(numpy scalars to Python, a struct walk), which for l2m's schemas — strings and bytes only
(:mod:`l2m.state.variables`) — is the identity: a request now takes ≈ 3 µs to build in Python
instead of ≈ 10 (≈ 60,000 requests per 160,000-log batch with 100,000 rules)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.errors import PySparkRuntimeError
from pyspark.serializers import write_int

CHUNK = 128  # requests in flight at most
CHUNK_BYTES = 32 << 10  # request bytes in flight at most


class MapIO:
    """Pipelined ``getValue`` / ``updateValue`` of one map state (module docstring)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        client = getattr(state, "_mapStateClient", None)
        api = getattr(client, "_stateful_processor_api_client", None)
        self._name: str = getattr(state, "_stateName", "")
        self._client = client
        self._api = api if api is not None and hasattr(api, "sockfile") else None

    def get(self, keys: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...] | None]:
        """The value of each key (None: absent or expired)."""
        if self._api is None or len(keys) < 2:
            return [self.state.getValue(k) for k in keys]
        import pyspark.sql.streaming.proto.StateMessage_pb2 as msg

        api = self._api
        dumps = api.pickleSer.dumps  # see _serialize_to_bytes's note (module docstring)
        out: list[tuple[Any, ...] | None] = []

        def request(key: tuple[Any, ...]) -> bytes:
            call = msg.MapStateCall(stateName=self._name,
                                    getValue=msg.GetValue(userKey=dumps(key)))
            return msg.StateRequest(stateVariableRequest=msg.StateVariableRequest(
                mapStateCall=call)).SerializeToString()

        for sent in self._exchange(request(k) for k in keys):
            status, error, value = sent
            if status != 0:
                raise PySparkRuntimeError(f"Error getting value: {error}")
            out.append(api._deserialize_from_bytes(value) if len(value) else None)
        return out

    def put(self, entries: Sequence[tuple[tuple[Any, ...], tuple[Any, ...]]]) -> None:
        """Write each (key, value)."""
        if self._api is None or len(entries) < 2:
            for key, value in entries:
                self.state.updateValue(key, value)
            return
        import pyspark.sql.streaming.proto.StateMessage_pb2 as msg

        dumps = self._api.pickleSer.dumps

        def request(key: tuple[Any, ...], value: tuple[Any, ...]) -> bytes:
            call = msg.MapStateCall(stateName=self._name, updateValue=msg.UpdateValue(
                userKey=dumps(key), value=dumps(value)))
            return msg.StateRequest(stateVariableRequest=msg.StateVariableRequest(
                mapStateCall=call)).SerializeToString()

        for status, error, _value in self._exchange(request(k, v) for k, v in entries):
            if status != 0:
                raise PySparkRuntimeError(f"Error updating map state value: {error}")

    def _exchange(self, requests: Iterator[bytes]) -> Iterator[tuple[int, str, bytes]]:
        """Each request's answer, in order, with at most a chunk in flight."""
        api = self._api
        assert api is not None
        sock = api.sockfile
        pending = size = 0
        for request in requests:
            write_int(0, sock)  # the message format version, as pyspark's own client
            write_int(len(request), sock)
            sock.write(request)
            pending += 1
            size += len(request)
            if pending >= CHUNK or size >= CHUNK_BYTES:
                sock.flush()
                for _ in range(pending):
                    yield api._receive_proto_message()
                pending = size = 0
        if pending:
            sock.flush()
            for _ in range(pending):
                yield api._receive_proto_message()
