"""A receiver that refuses native histograms (Prometheus 2.40-3.7 without
``--enable-feature=native-histograms``: 500 "native histograms are disabled", measured on 2.42
in tests/integration/test_native_histograms_receiver.py) costs only the histograms (review 56
F4): the refused request goes again without them, they are counted as skipped
(``histograms_refused``), said once, skipped without trying for HISTOGRAMS_PAUSE_S, then tried
again — so turning the flag on resumes delivery without a restart — and every tenant's floats
get in, the offsets committed as for any poll."""

from __future__ import annotations

import cramjam

from l2m.remotewrite.client import Delivery
from l2m.remotewrite.encode import Metadata, Series, WireHistogram
from l2m.remotewrite.outbox import HISTOGRAMS_REFUSED, Request
from l2m.runtime.deliver import HISTOGRAMS_PAUSE_S
from tests.unit.remotewrite.test_encode_histograms import decode
from tests.unit.remotewrite.test_remotewrite_histograms import record
from tests.unit.remotewrite.test_remotewrite_outbox import W, sample
from tests.unit.runtime.test_deliver_loop import Record, Sender, loop

DISABLED = "native histograms are disabled\n"  # 2.42's body, as the sender strips it
REFUSED_LINE = (
    "l2m deliver: ep: the receiver does not take native histograms (HTTP 500: native "
    "histograms are disabled); they are skipped (histograms_refused) and the other samples "
    "sent, tried again every 10 minutes: start Prometheus with "
    "--enable-feature=native-histograms (Mimir: native_histograms_ingestion_enabled: true)")


class Receiver:
    """Prometheus without the flag (``enabled`` False): a request holding a histogram is
    answered 500 and nothing of it is stored; else 204, and what it held is kept."""

    def __init__(self) -> None:
        self.enabled = False
        self.floats: list[tuple[str | None, int]] = []  # (tenant, timestamp) stored
        self.histograms: list[tuple[str | None, int]] = []
        self.metadata: list[str] = []

    def __call__(self, body: bytes, tenant: str | None) -> Delivery:
        request = decode(bytes(cramjam.snappy.decompress_raw(body)))
        if any(ts.histograms for ts in request.timeseries) and not self.enabled:
            return Delivery(500, DISABLED.strip(), 1)
        for ts in request.timeseries:
            self.floats += [(tenant, s.timestamp) for s in ts.samples]
            self.histograms += [(tenant, h.timestamp) for h in ts.histograms]
        self.metadata += [m.metric_family_name for m in request.metadata]
        return Delivery(204, "", 1)


def _records(start: int) -> list[Record]:
    """Seven records from offset ``start``: acme 3 floats + 2 histograms, globex 1 + 1."""
    values = [sample(account="acme", i="0"), record(account="acme", i="0"),
              sample(account="acme", i="1"), record(account="acme", i="1"),
              sample(account="acme", i="2"), sample(account="globex"),
              record(account="globex")]
    return [Record(v, start + n) for n, v in enumerate(values)]


def _polled(sender: Sender) -> list[tuple[str | None, int, int]]:
    """(tenant, floats, histograms) of each request the sender was given."""
    out = []
    for tenant, body in sender.seen:
        request = decode(bytes(cramjam.snappy.decompress_raw(body)))
        out.append((tenant, sum(len(ts.samples) for ts in request.timeseries),
                    sum(len(ts.histograms) for ts in request.timeseries)))
    return out


def test_refused_histograms_are_skipped_the_floats_sent_and_histograms_tried_again_later(
        monkeypatch):
    receiver = Receiver()
    sender = Sender(receiver)
    records = _records(0)
    delivery, lines, consumers = loop(records, sender, monkeypatch)
    now = [1000.0]
    delivery.clock = lambda: now[0]

    delivery.run()
    # acme's request refused, sent again without its 2 histograms; globex's histogram then
    # left out without trying (one refusal a pause, not one a tenant).
    assert _polled(sender) == [("acme", 3, 2), ("acme", 3, 0), ("globex", 1, 0)]
    assert receiver.floats == [("acme", W + 0), ("acme", W + 2), ("acme", W + 4),
                               ("globex", W + 5)]
    assert delivery.tally.sent == 4
    assert delivery.tally.skipped == {HISTOGRAMS_REFUSED: 3}
    assert delivery.tally.refused == {}
    assert delivery.tally.requests == {"sent": 2, "refused": 1, "retried": 0,
                                       "auth_failed": 0}
    assert consumers[-1].commits == [7]
    assert lines == [REFUSED_LINE]
    assert delivery.error is None and delivery.healthy()

    # Within the pause: not tried, counted; the flag turned on meanwhile changes nothing yet.
    receiver.enabled = True
    records += _records(7)
    now[0] += HISTOGRAMS_PAUSE_S - 1
    sender.seen.clear()
    delivery.run()
    assert _polled(sender) == [("acme", 3, 0), ("globex", 1, 0)]
    assert delivery.tally.sent == 8
    assert delivery.tally.skipped == {HISTOGRAMS_REFUSED: 6}
    assert consumers[-1].commits == [14]
    assert receiver.histograms == []

    # The pause over: tried again, taken, said.
    records += _records(14)
    now[0] += 1
    sender.seen.clear()
    delivery.run()
    assert _polled(sender) == [("acme", 3, 2), ("globex", 1, 1)]
    assert receiver.histograms == [("acme", W + 15), ("acme", W + 17), ("globex", W + 20)]
    assert delivery.tally.sent == 8 + 7
    assert delivery.tally.skipped == {HISTOGRAMS_REFUSED: 6}
    assert consumers[-1].commits == [21]
    assert lines == [REFUSED_LINE, "l2m deliver: ep: the receiver takes native histograms again"]

    # Refused again later: said again, once.
    receiver.enabled = False
    records += _records(21)
    sender.seen.clear()
    delivery.run()
    assert _polled(sender) == [("acme", 3, 2), ("acme", 3, 0), ("globex", 1, 0)]
    assert delivery.tally.skipped == {HISTOGRAMS_REFUSED: 9}
    assert delivery.tally.sent == 15 + 4
    assert lines[2:] == [REFUSED_LINE]


def test_a_request_of_histograms_only_keeps_its_metadata_and_a_new_series_empty_one_counts(
        monkeypatch):
    """A request left with no sample still carries the tenant's metadata (sent once, with
    its first request); a new counter series' empty histogram before its first is one more
    histogram skipped."""
    receiver = Receiver()
    sender = Sender(receiver)
    delivery, lines, _ = loop([], sender, monkeypatch)
    empty = WireHistogram(W - 1, 0, 0.0, 3)
    first = WireHistogram(W, 1, 2.0, 3, zero_count=1)
    request = Request.of("acme", [Series({"__name__": "lat_ms"}, histograms=[empty, first])],
                         [Metadata("lat_ms", "histogram"), Metadata("x_total", "counter")])
    assert delivery._send([request])
    assert _polled(sender) == [("acme", 0, 2), ("acme", 0, 0)]
    assert receiver.metadata == ["lat_ms", "x_total"]
    assert delivery.tally.skipped == {HISTOGRAMS_REFUSED: 2}
    assert delivery.tally.sent == 0
    assert lines == [REFUSED_LINE]
    # Within the pause a request of histograms only, no metadata: nothing sent at all.
    sender.seen.clear()
    bare = Request.of("acme", [Series({"__name__": "lat_ms"}, histograms=[first])], [])
    assert delivery._send([bare])
    assert sender.seen == []
    assert delivery.tally.skipped == {HISTOGRAMS_REFUSED: 3}


def test_other_answers_of_a_histogram_request_are_not_a_refusal_of_histograms(monkeypatch):
    """Only the receiver's text decides: a 500 about something else, or the text on a 4xx,
    is settled as any answer (refused for its reason), the histograms not skipped."""
    answers = iter([Delivery(500, "out of bounds", 1), Delivery(404, DISABLED, 1)])
    sender = Sender(lambda body, tenant: next(answers))
    delivery, lines, _ = loop([], sender, monkeypatch)
    one = Request.of("acme", [Series({"__name__": "lat_ms"}, histograms=[
        WireHistogram(W, 1, 2.0, 3, zero_count=1)])], [])
    assert delivery._send([one, one])
    assert delivery.tally.skipped == {}
    assert delivery.tally.refused == {("too_old", "acme"): 1, ("http_404", "acme"): 1}
    assert lines == []


def test_a_refusal_of_histograms_is_final_for_the_sender_and_any_other_5xx_retried():
    from l2m.remotewrite.client import histograms_disabled, retriable

    assert not retriable(500, "native histograms are disabled")
    assert not retriable(503, "Native histograms are disabled\n")
    assert retriable(500, "histograms are fine")
    assert histograms_disabled(500, "native histograms are disabled")
    assert not histograms_disabled(400, "native histograms are disabled")
    assert not histograms_disabled(500, "out-of-order native histogram ingestion is disabled")


def test_the_pause_is_ten_minutes():
    assert HISTOGRAMS_PAUSE_S == 600.0
