"""MapIO's pipelined path, on pyspark's own state client against a stand-in for the JVM's
state server: a Unix socket speaking the server's framing and protobuf messages (what
``TransformWithStateInPySparkStateServer`` does for map state's getValue and updateValue).
The test suite's other stand-in (tests/support/tws.py) has no client, so MapIO falls back to
the public calls there; this one checks the wire format l2m writes itself."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pyspark.sql.streaming.proto.StateMessage_pb2 as msg
import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql.streaming.map_state_client import MapStateClient
from pyspark.sql.streaming.stateful_processor import MapState
from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from l2m.state import mapio
from l2m.state.mapio import MapIO
from l2m.state.variables import ENTRY, SERIES_KEY

# The processor's schemas, written out: a change to them is a change of the stored layout.
KEY = StructType([StructField("rule", StringType()), StructField("series", StringType())])
VALUE = StructType([StructField("value", BinaryType())])
assert (SERIES_KEY, ENTRY) == (KEY, VALUE)


class StateServer:
    """Answers map-state getValue/updateValue requests in order, one at a time, as the JVM's
    server does; counts them."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.values: dict[bytes, bytes] = {}
        self.requests = 0
        self.fail_key: bytes | None = None
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        stream = conn.makefile("rwb")
        while True:
            try:
                head = stream.read(8)
            except OSError:  # the client closed its socket (the test is over)
                return
            if len(head) < 8:
                return
            _version, length = struct.unpack(">ii", head)
            request = msg.StateRequest()
            request.ParseFromString(stream.read(length))
            self.requests += 1
            call = request.stateVariableRequest.mapStateCall
            response = msg.StateResponse(statusCode=0)
            if call.HasField("getValue"):
                response.value = self.values.get(call.getValue.userKey, b"")
            elif call.HasField("updateValue"):
                if call.updateValue.userKey == self.fail_key:
                    response = msg.StateResponse(statusCode=1, errorMessage="disk full")
                else:
                    self.values[call.updateValue.userKey] = call.updateValue.value
            body = response.SerializeToString()
            try:
                stream.write(struct.pack(">i", len(body)) + body)
                stream.flush()
            except OSError:  # the client gave up (an error it raised): so does the task
                return


@pytest.fixture
def state(tmp_path: Path) -> Any:
    server = StateServer(tmp_path / "state.sock")
    client = StatefulProcessorApiClient(server.path, StructType())
    map_client = MapStateClient(client, KEY, VALUE)
    yield MapState(map_client, "counter_series"), server
    client._client_socket.close()


def test_pipelined_writes_and_reads_agree_with_pysparks_own_calls(state: Any) -> None:
    map_state, server = state
    io = MapIO(map_state)
    assert io._api is not None  # the pipelined path, not the fallback
    entries = [(("r", f"s{i}"), (f"value {i}".encode(),)) for i in range(300)]
    io.put(entries)
    assert server.requests == 300
    # Read back pipelined, absent keys among them, then one at a time by pyspark itself.
    keys = [("r", f"s{i}") for i in range(0, 310, 7)]
    got = io.get(keys)
    assert [None if g is None else bytes(g[0]) for g in got] == \
        [f"value {i}".encode() if i < 300 else None for i in range(0, 310, 7)]
    assert bytes(map_state.getValue(("r", "s7"))[0]) == b"value 7"
    map_state.updateValue(("r", "s7"), (b"changed",))
    assert bytes(io.get([("r", "s6"), ("r", "s7")])[1][0]) == b"changed"


def test_chunks_bound_what_is_in_flight(state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    map_state, server = state
    monkeypatch.setattr(mapio, "CHUNK", 3)
    io = MapIO(map_state)
    io.put([(("r", f"s{i}"), (b"x" * 10,)) for i in range(10)])  # 3 + 3 + 3 + 1
    assert [bytes(v[0]) for v in io.get([("r", f"s{i}") for i in range(10)])] == [b"x" * 10] * 10
    assert server.requests == 20


def test_a_refused_write_raises_as_pysparks_call_does(state: Any) -> None:
    map_state, server = state
    io = MapIO(map_state)
    server.fail_key = map_state._mapStateClient._stateful_processor_api_client \
        ._serialize_to_bytes(map_state._mapStateClient.user_key_schema, ("r", "bad"))
    with pytest.raises(PySparkRuntimeError, match="disk full"):
        io.put([(("r", "ok"), (b"1",)), (("r", "bad"), (b"2",)), (("r", "after"), (b"3",))])


def test_keys_and_values_are_the_bytes_pysparks_own_calls_send(state: Any) -> None:
    # MapIO pickles them as they are, skipping pyspark's conversion to Spark's internal form:
    # the same bytes for l2m's schemas (strings and bytes), unicode and empty ones included.
    map_state, _server = state
    api = map_state._mapStateClient._stateful_processor_api_client
    for key in [("r", "s"), ("", ""), ("règle", "série ✓"), ("r", "x" * 5000)]:
        assert api.pickleSer.dumps(key) == api._serialize_to_bytes(KEY, key)
    for value in [(b"",), (b"\x00\xff" * 3000,)]:
        assert api.pickleSer.dumps(value) == api._serialize_to_bytes(VALUE, value)
