"""A keyword field whose values mix strings, integers, booleans, objects and nulls (issue 58's
corpus: ``host`` a name in one source and an object in another, flags) takes its string
forms column-wise, and they are the reference's: labels and keyword matches alike."""

from __future__ import annotations

import json
import random
from pathlib import Path

import orjson

from l2m.batch.local import RunSettings, run_local
from l2m.rules.loader import load_rules
from tests.support import reference

VALUES = ["web-1", "", "true", "1", 7, -3, 0, True, False, None, {"name": "db"}, [1, 2], "é"]


def test_mixed_kinds_take_the_reference_string_forms(tmp_path: Path) -> None:
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(
        "rules:\n"
        "  - {id: by-host, name: by_host_total, kind: counter, query: '*', aggregation: count,"
        " group_by: [host]}\n"
        "  - {id: flag, name: flag_total, kind: counter, query: 'host:true OR host:7',"
        " aggregation: count}\n"
        "  - {id: named, name: named_total, kind: counter, query: 'host:web*',"
        " aggregation: count, group_by: [host]}\n")
    rules = list(load_rules([rules_file]).rules)
    for seed in range(6):
        rng = random.Random(seed)
        # one slice without floats (the column-wise path), kinds drawn from a subset per seed
        kinds = rng.sample(VALUES, rng.randint(2, len(VALUES)))
        lines = []
        for i in range(400):
            doc: dict = {"@timestamp": 1_795_341_600_000 + i}
            if rng.random() < 0.9:
                doc["host"] = rng.choice(kinds)
            lines.append(orjson.dumps(doc))
        got = [json.loads(x) for x in run_local(RunSettings().routing(rules), lines).lines]
        assert got == reference.backfill(rules, [x.decode() for x in lines]), kinds
