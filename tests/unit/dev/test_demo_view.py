"""`l2m demo`'s table (l2m/dev/demo.py, render_table): distinct series always read
differently, values are plain numbers."""

from __future__ import annotations

from typing import Any

import pytest

from l2m.dev.demo import format_value, render_table, wrap_labels

T = 1_795_491_000_000


def sample(name: str, labels: dict[str, str], value: float, kind: str = "counter",
           ts: int = T) -> dict[str, Any]:
    return {"name": name, "kind": kind, "labels": labels, "value": value, "timestamp": ts}


def declines() -> list[dict[str, Any]]:
    """Two series whose label texts share their first 46 characters (the old column cut
    them there: both rows read the same)."""
    return [sample("payment_declines_total",
                   {"payment_decline_code": "card_declined", "payment_provider": p}, 4)
            for p in ("adyen", "paypal")]


def rows_of(lines: list[str]) -> list[str]:
    """The table's rows without the header and the trailing note."""
    return [line for line in lines[1:] if not line.startswith("…")]


def test_labels_are_shown_whole_when_there_is_room() -> None:
    lines = render_table(declines(), rows=10)
    assert any("payment_decline_code=card_declined,payment_provider=adyen " in line
               for line in lines)
    assert any("payment_decline_code=card_declined,payment_provider=paypal " in line
               for line in lines)
    # The header's columns line up with the rows' (the labels column is the widest text).
    header, *rows = lines
    assert header.index("value") + len("value") == rows[0].index(" 4 ") + 2


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_distinct_series_stay_distinct_in_a_narrow_terminal(width: int) -> None:
    samples = [*declines(),
               sample("http_server_errors_total",
                      {"http_status": "500", "service": "auth", "severity": "page"}, 13),
               sample("http_server_errors_total",
                      {"http_status": "500", "service": "cart", "severity": "page"}, 9),
               sample("l2m_late_logs_total", {}, 15),
               sample("very_long", {"k": "x" * 150}, 1),
               sample("very_long", {"k": "x" * 149 + "y"}, 1)]
    lines = render_table(samples, rows=20, width=width)
    # Each series' row with its continuation lines, as printed.
    blocks: list[str] = []
    for line in rows_of(lines):
        if line.startswith(" "):
            blocks[-1] += "\n" + line
        else:
            blocks.append(line)
    assert len(blocks) == len(samples)
    assert len(set(blocks)) == len(samples)  # no two series print the same
    # Joined back, a row's labels column holds the series' whole label text (these labels
    # have no spaces: a row's labels are the first word after the metric column).
    name_w = lines[0].index("labels") - 1
    by_name = sorted(samples, key=lambda s: (s["name"], sorted(s["labels"].items())))
    for block, s in zip(blocks, by_name, strict=True):
        first, *more = block.split("\n")
        assert first.startswith(s["name"] + " ")
        shown = first[name_w + 1:].split(" ", 1)[0] + "".join(line.strip() for line in more)
        assert shown == ",".join(f"{k}={v}" for k, v in sorted(s["labels"].items())), block
    if width >= 100:  # room enough: every line fits the terminal
        assert max(len(line) for line in lines) <= width


def test_the_labels_column_fits_the_terminal() -> None:
    lines = render_table(declines(), rows=10, width=80)
    assert max(len(line) for line in lines) <= 80
    assert len(rows_of(lines)) > 2  # the labels wrapped
    joined = "\n".join(lines)
    assert "payment_provider=adyen" in joined and "payment_provider=paypal" in joined


def test_wrap_labels_breaks_after_commas_and_keeps_every_character() -> None:
    text = "http_status=500,service=auth,severity=page"
    assert wrap_labels(text, 100) == [text]
    assert wrap_labels("", 10) == [""]
    assert wrap_labels(text, 30) == ["http_status=500,service=auth,", "severity=page"]
    long = "k=" + "x" * 45
    lines = wrap_labels(f"a=1,{long}", 20)
    assert "".join(lines) == f"a=1,{long}" and max(map(len, lines)) <= 20


@pytest.mark.parametrize(("value", "shown"), [
    (0, "0"), (4, "4"), (3386150.0, "3,386,150"), (3.38615e6, "3,386,150"),
    (1e20, "100,000,000,000,000,000,000"), (15121.3, "15,121.30"), (45.4965, "45.50"),
    (-2.5, "-2.50"), (0.5, "0.5"), (0.012345, "0.0123"), (0.999, "0.999"),
    (123456789.125, "123,456,789.12"), (float("inf"), "inf")])
def test_values_are_plain_numbers(value: float, shown: str) -> None:
    assert format_value(value) == shown


def test_no_value_in_the_table_is_in_scientific_notation() -> None:
    samples = [sample("http_response_bytes_total", {"service": "auth"}, 3.38615e6),
               sample("payment_amount_sum", {"payment_currency": "EUR"}, 2185.96, "gauge"),
               sample("tiny", {}, 0.00001234, "gauge"), sample("huge", {}, 1.5e18)]
    lines = render_table(samples, rows=10)
    assert not any("e+" in line or "e-" in line for line in lines)
    assert any("3,386,150" in line for line in lines)
    assert any("1,500,000,000,000,000,000" in line for line in lines)


def test_histogram_buckets_are_hidden_and_the_rest_counted() -> None:
    samples = [*declines(),
               sample("payment_declines_total", {"payment_provider": "stripe"}, 1),
               sample("latency_bucket", {"le": "0.5"}, 3)]
    lines = render_table(samples, rows=10, per_metric=2)
    assert not any("latency_bucket" in line for line in lines)
    assert lines[-1] == "… 1 more series (histogram buckets not shown)"
