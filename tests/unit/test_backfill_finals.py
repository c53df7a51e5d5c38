"""Backfill's last stage (l2m.batch.finals): sort keys that keep Python's order, and the
tally rows beside the samples."""

from __future__ import annotations

import math
import random

import orjson
import pyarrow as pa

from l2m.batch.finals import FINAL_ARROW, MATCHES, STATUS, ordered_lines, sort_key
from l2m.engine.samples import SampleLines, sample
from l2m.rules.loader import load_text

ALPHABET = ["", "a", "b", "\x00", "\x00\x00", "\x01", "é", "\uffff", "\U0001f600", "a\x00",
            "ab", " ", "~"]


def _labels(rng: random.Random) -> tuple[tuple[str, str], ...]:
    names = sorted(rng.sample(["a", "b", "c", "l2m_overflow"], rng.randint(0, 3)))
    return tuple((name, "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 3))))
                 for name in names)


def test_sort_keys_order_as_the_python_tuples_do():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    items = []
    for _ in range(3_000):
        window = rng.choice([None, 0, 60_000, -60_000, 1 << 40, -(1 << 40)])
        items.append((_labels(rng), window, rng.randint(0, 20)))
    by_python = sorted(items, key=lambda t: (t[0], t[1] or 0, t[2]))
    by_key = sorted(items, key=lambda t: sort_key(*t))
    assert [(t[0], t[1] or 0, t[2]) for t in by_key] == \
        [(t[0], t[1] or 0, t[2]) for t in by_python]


def test_samples_come_out_by_rule_rank_then_key_and_tallies_apart():
    rows = [
        (1, sort_key([("a", "x")], None, 0), b'{"s":3}', "r1", True, None, None),
        (0, sort_key([("a", "y")], None, 0), b'{"s":2}', "r0", False, None, None),
        (0, sort_key([("a", "x")], 60_000, 0), b'{"s":1}', "r0", True, None, None),
        (None, None, None, "ok", None, STATUS, 7),
        (None, None, None, "r0", None, MATCHES, 5),
    ]
    table = pa.Table.from_pylist([dict(zip(FINAL_ARROW.names, r, strict=True)) for r in rows],
                                 schema=FINAL_ARROW)
    samples, tallies = ordered_lines(table)
    assert samples.column("line").to_pylist() == [b'{"s":1}', b'{"s":2}', b'{"s":3}']
    assert samples.column("finite").to_pylist() == [True, False, True]
    assert tallies.to_pylist() == [{"tally": STATUS, "rule": "ok", "count": 7},
                                   {"tally": MATCHES, "rule": "r0", "count": 5}]


SAMPLE_RULES = """\
rules:
  - {id: plain, name: plain_total, kind: counter, query: "*", aggregation: count,
     group_by: [a, b]}
  - {id: tenant, name: "tenant_max", kind: gauge, query: "*", aggregation: max,
     field: v, group_by: [a], account: acme, labels: {team: "q\\"uote"}}
"""


def test_sample_lines_are_orjson_of_the_sample_byte_for_byte():
    values = [0.0, -0.0, 1.0, 0.1, 1e20, 1e-7, 123456789.123, 2.0 ** 60, -5.5, math.inf,
              -math.inf, math.nan, 3]
    label_values = ["", "x", "é", "\U0001f600", 'q"\\', "\x00\x1f\n", "a" * 300]
    for rule in load_text(SAMPLE_RULES)[0]:
        lines = SampleLines(rule)
        for value in values:
            for text in label_values:
                labels = [("a", text), ("b", "-")]
                for ts in (0, 1_764_000_000_000, -60_000):
                    expected = orjson.dumps(sample(rule, rule.name, dict(labels), value, ts))
                    line, finite = lines.line(lines.prefix(labels), value, ts)
                    assert line == expected
                    assert finite == math.isfinite(value)
