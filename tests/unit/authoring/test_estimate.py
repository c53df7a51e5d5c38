"""``l2m validate --estimate`` (l2m.authoring.estimate, issue 55 item 3): what each rule would
cost, from a sample — the exact counts of the sample, the projection on generated logs whose
answer is known (a label of 50 values saturates at 50, a unique id grows a series per log,
two labels of 50 and 10 values stop at 500), the caps it would pass, the unique-id warning
and a sample it cannot estimate from."""

from __future__ import annotations

import io
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from l2m.authoring.estimate import (
    Growth,
    Sample,
    caps_hit,
    estimate_command,
    fit,
    growth,
    per_second,
    read_sample,
    report,
    unique_id_warnings,
)
from l2m.batch.local import RunSettings, run_local
from l2m.batch.summary import BackfillSummary
from l2m.cli import main
from l2m.config.job import JobConfig, LimitsConfig
from l2m.engine.admission import rule_caps
from l2m.errors import InputError
from l2m.rules.loader import load_text
from l2m.rules.model import Rule

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start

RULES_TEXT = """\
rules:
  - {id: by-code, name: by_code_total, kind: counter, query: '*', aggregation: count,
     group_by: [code]}
  - {id: by-id, name: by_id_total, kind: counter, query: '*', aggregation: count,
     group_by: [request.id]}
  - {id: by-id-g, name: by_id_g, kind: gauge, query: '*', aggregation: count,
     group_by: [request.id]}
  - {id: pairs, name: pairs_total, kind: counter, query: '*', aggregation: count,
     group_by: [code, shard]}
  - {id: errors, name: errors_total, kind: counter, query: 'level:error', aggregation: count}
  - {id: off, name: off_total, kind: counter, query: '*', aggregation: count, enabled: false}
"""


def _rules(text: str = RULES_TEXT) -> list[Rule]:
    rules, problems = load_text(text)
    assert problems == []
    return rules


def _sample(path: Path, logs: int, per_second: float = 1.0, seed: int = 55) -> Path:
    """``logs`` logs at ``per_second`` of event time: ``code`` one of 50 values, ``shard``
    one of 10, ``request.id`` unique, every tenth ``level: error``."""
    rng = random.Random(seed)
    with path.open("wb") as f:
        for i in range(logs):
            f.write(orjson.dumps({
                "@timestamp": T0 + int(i * 1000 / per_second), "code": f"c{rng.randrange(50)}",
                "shard": rng.randrange(10), "request": {"id": f"{seed}-{i}"},
                "level": "error" if i % 10 == 0 else "info"}) + b"\n")
    return path


def _estimate(rules: list[Rule], inputs: list[Path], cfg: JobConfig | None = None) -> str:
    out = io.StringIO()
    assert estimate_command(rules, [str(p) for p in inputs], cfg or JobConfig(), out) == 0
    return out.getvalue()


def _projected(text: str) -> dict[str, list[str]]:
    """The projection table's rows by rule: logs/s, growth, live, per day, caps."""
    table = text.split("projected at the sample's rate")[1].splitlines()[2:]
    rows = {}
    for line in table:
        if not line.startswith("  "):
            break
        cells = [c for c in line.strip().split("  ") if c]
        rows[cells[0].strip()] = [c.strip() for c in cells[1:]]
    return rows


def test_known_answers_on_generated_logs(tmp_path):
    """2,000 logs at 1/s (over 1,999 s: 1.0005/s): 50 codes flat at 50; a unique id grows
    as the logs (7 days at that rate: 605,103 live counter series, 60 per gauge window); 50
    × 10 pairs stop at 500."""
    text = _estimate(_rules(), [_sample(tmp_path / "s.jsonl", 2_000)])
    rows = _projected(text)
    assert rows["by-code"] == ["1.00", "flat", "~50", "~50", "-"]
    assert rows["by-id"] == ["1.00", "n^1.00", "~605,103", "~86,443", "rule (10,000)"]
    assert rows["by-id-g"] == ["1.00", "n^1.00", "~60", "~86,443", "-"]
    assert rows["pairs"] == ["1.00", "n^0.33 ≤ 500", "~500", "~500", "-"]
    assert rows["errors"] == ["0.10", "flat", "~1", "~1", "-"]
    assert "off" not in rows  # disabled rules are not run


def test_the_exact_text_for_a_small_sample(tmp_path):
    sample = _sample(tmp_path / "s.jsonl", 200, per_second=2.0)
    with sample.open("ab") as f:
        f.write(b'\n{"no": "time"}\nnot json\n')
    assert _estimate(_rules(), [sample]) == """\
estimate: 202 logs in the sample, 200 with an event time over 1m 39s, 1 without one, \
1 malformed — 2.01 logs/s

seen in the sample (exact; every series, no caps applied):
  rule     kind     logs matched   share  series  most in a window  largest label (values)
  by-code  counter           200  100.0%      49                 -  code (49)
  by-id    counter           200  100.0%     200                 -  request_id (200)
  by-id-g  gauge             200  100.0%     200               120  request_id (200)
  pairs    counter           200  100.0%     171                 -  code (49)
  errors   counter            20   10.0%       1                 -  -

projected at the sample's rate (Heaps' law S = K·n^β fitted on the sample's first quarter, \
half and whole; live: counters over counter_ttl 7d, gauges per one-minute window):
  rule     logs/s  growth  live series (proj.)  series per day (proj.)  caps hit (proj.)
  by-code    2.01  n^0.29                 ~589                    ~338  -
  by-id      2.01  n^1.00           ~1,215,678                ~173,668  rule (10,000)
  by-id-g    2.01  n^1.00                 ~121                ~173,668  -
  pairs      2.01  n^0.90             ~441,094                 ~76,309  rule (10,000)
  errors     0.20  flat                     ~1                      ~1  -
note: 1 rule(s) matched fewer than 100 logs: their growth is fitted on little — a larger \
sample says more
warning: rule 'by-id' groups by request.id: 200 distinct values in 200 logs — a unique id \
makes a series per log
warning: rule 'by-id-g' groups by request.id: 200 distinct values in 200 logs — a unique id \
makes a series per log
"""


def test_fit_and_growth():
    assert fit([(100, 100), (50, 50)]) == 1.0
    assert fit([(100, 10), (10_000, 100)]) == pytest.approx(0.5)
    assert fit([(100, 1_000)]) == 1.0  # clipped: never more series than logs
    assert fit([]) == 1.0
    assert Growth(50, 1_000, None, None).at(1e9) == 50
    assert Growth(100, 100, 1.0, None).at(1e6) == 1e6
    assert Growth(100, 100, 1.0, 2_500).at(1e6) == 2_500
    assert Growth(100, 100, 1.0, None).at(10) == 10
    assert Growth(100, 100, 0.5, 2_500).describe() == "n^0.50 ≤ 2,500"


def test_unique_id_warning_threshold():
    rule = _rules("rules:\n  - {id: u, name: u_total, kind: counter, query: '*', "
                  "aggregation: count, group_by: [a, request_id]}\n")

    def warned(logs: int, values: int) -> list[str]:
        summary = BackfillSummary.for_rules(rule)
        summary.matches["u"] = logs
        summary.label_values["u"] = {"a": 3, "request_id": values}
        return unique_id_warnings(rule, summary)

    assert warned(1_000, 998) == [
        "warning: rule 'u' groups by request_id: 998 distinct values in 1,000 logs — a unique "
        "id makes a series per log"]
    assert warned(100, 90) != []
    assert warned(100, 89) == []
    assert warned(99, 99) == []  # too few logs to tell


def test_caps_per_rule_metric_and_account_with_overrides():
    rules = _rules("""\
rules:
  - {id: a1, name: m_total, kind: counter, query: '*', aggregation: count, account: acme,
     group_by: [x], labels: {k: one}}
  - {id: a2, name: m_total, kind: counter, query: '*', aggregation: count, account: acme,
     group_by: [x], labels: {k: two}, max_series: 500}
  - {id: a3, name: g, kind: gauge, query: '*', aggregation: count, account: acme,
     group_by: [x], max_series: 2000}
  - {id: b1, name: m_total, kind: counter, query: '*', aggregation: count, account: big,
     group_by: [x]}
  - {id: open, name: o_total, kind: counter, query: '*', aggregation: count, group_by: [x]}
""")
    limits = LimitsConfig(max_series_per_rule=1_000, max_series_per_metric=1_500,
                          max_series_per_account=2_000,
                          accounts=(("big", (("per_rule", 5_000),)),))
    live = {"a1": 900.0, "a2": 700.0, "a3": 1_400.0, "b1": 4_000.0, "open": 3_000.0}
    hits = caps_hit(rules, live, rule_caps(rules, limits.series))
    assert hits == {
        # a1 + a2 = 1,600 > 1,500 (one metric); acme's counters 1,600 and gauges 1,400 are
        # each within 2,000 (counted apart: 3,000 together)
        "a1": [("metric", 1_500)],
        "a2": [("rule", 500), ("metric", 1_500)],
        "b1": [("metric", 1_500), ("account", 2_000)],  # its rule cap is 5,000
        "open": [("rule", 1_000)],  # no account: its own cap only
    }


def test_no_event_time_or_no_logs_is_said_plainly(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n\n")
    with pytest.raises(InputError, match=r"empty.jsonl: no logs, nothing to estimate from"):
        _estimate(_rules(), [empty])
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_bytes(b'{"message": "x"}\n{"@timestamp": "yesterday"}\n[1]\n')
    with pytest.raises(InputError, match=r"no log with an event time in '@timestamp' among 3 "
                                         r"line\(s\)"):
        _estimate(_rules(), [untimed])
    other = replace(JobConfig(), timestamp_field="ts")
    with pytest.raises(InputError, match=r"in 'ts' among"):
        _estimate(_rules(), [_sample(tmp_path / "s.jsonl", 10)], other)


def test_one_event_time_has_no_rate(tmp_path):
    sample = tmp_path / "same.jsonl"
    sample.write_bytes(b"".join(orjson.dumps({"@timestamp": T0, "code": c, "request":
                                              {"id": c}}) + b"\n" for c in "abc"))
    text = _estimate(_rules(), [sample])
    assert text.split("\n\n")[2] == """\
not projected (live series as seen; caps checked against them):
  rule     live series (seen)  caps hit
  by-code                   3  -
  by-id                     3  -
  by-id-g                   3  -
  pairs                     3  -
  errors                    0  -
note: 5 rule(s) not projected: every event time in the sample is 2026-11-22T10:00:00Z, so \
it has no rate — a sample over a span of time says more
"""


def test_cli_prints_validate_then_the_estimate_and_exits_0(tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_TEXT)
    assert main(["validate", str(rules), "--estimate",
                 str(_sample(tmp_path / "s.jsonl", 300))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: 6 rules in 1 file(s), 1 disabled\nestimate: 300 logs")
    assert "warning: rule 'by-id' groups by request.id: 300 distinct values in 300 logs" in out


def test_units_of_the_text():
    assert [per_second(r) for r in (0, 0.0015, 0.2, 2.014, 123_456.7)] == \
        ["0.00", "0.0015", "0.20", "2.01", "123,457"]


def test_no_pyspark_is_imported(tmp_path):
    sample = _sample(tmp_path / "s.jsonl", 50)
    code = ("import io, sys\nfrom l2m.authoring.estimate import estimate_command\n"
            "from l2m.config.job import JobConfig\nfrom l2m.rules.loader import load_text\n"
            f"rules, _ = load_text({RULES_TEXT!r})\n"
            f"estimate_command(rules, [{str(sample)!r}], JobConfig(), io.StringIO())\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == "[]\n"


FIVE_AND_IDS = """\
rules:
  - {id: five, name: five_total, kind: counter, query: '*', aggregation: count,
     group_by: [code]}
  - {id: ids, name: ids_total, kind: counter, query: '*', aggregation: count, group_by: [id]}
"""


def test_a_sample_too_small_to_fit_says_so_and_sees_a_label_saturate(tmp_path):
    """50 logs (under 2 × MIN_PREFIX lines: no prefix is a point of the fit): a label of 5
    values, all seen in the first half, stays flat at 5 (through (1, 1) alone it was
    n^0.41, ~241 live series); a unique id still grows, its projection marked a guess."""
    rng = random.Random(55)
    sample = tmp_path / "fifty.jsonl"
    sample.write_bytes(b"".join(orjson.dumps({"@timestamp": T0 + 1000 * i,
                                              "code": f"c{rng.randrange(5)}", "id": i}) + b"\n"
                                for i in range(50)))
    assert _estimate(_rules(FIVE_AND_IDS), [sample]).split("\n\n")[2] == """\
projected at the sample's rate (the sample is too small to fit growth on its prefixes: flat \
where its second half made no new series, else S = n^β through the whole sample, a guess; \
live: counters over counter_ttl 7d, gauges per one-minute window):
  rule  logs/s  growth          live series (proj.)  series per day (proj.)  caps hit (proj.)
  five    1.02  flat                             ~5                      ~5  -
  ids     1.02  n^1.00 (guess)             ~617,143                 ~88,163  rule (10,000)
note: 1 rule(s) still made new series in the second half of a sample of 50 lines, too few \
to fit their growth (at least 64 lines): their projection, marked (guess), rests on the \
whole sample alone — a larger sample says more
"""


def test_a_sample_under_128_lines_is_fitted_on_its_half_and_whole(tmp_path):
    text = _estimate(_rules(), [_sample(tmp_path / "s.jsonl", 80)])
    assert "\nprojected at the sample's rate (Heaps' law S = K·n^β fitted on the sample's " \
        "first half and whole; live: counters over counter_ttl 7d, gauges per one-minute " \
        "window):\n" in text
    assert "(guess)" not in text


def test_growth_of_one_point_is_a_guess_unless_flat():
    runs = [BackfillSummary(matches={"r": 50}, series_created={"r": 5}),
            BackfillSummary(matches={"r": 25}, series_created={"r": 4})]
    assert growth("r", runs, fitted=1) == Growth(5, 50, pytest.approx(0.4114, abs=1e-4),
                                                 None, guess=True)
    assert growth("r", runs, fitted=1).describe() == "n^0.41 (guess)"
    runs[1].series_created["r"] = 5
    assert growth("r", runs, fitted=1).describe() == "flat"


def test_no_enabled_rule_is_one_line(tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {id: off, name: off_total, kind: counter, query: '*', "
                     "aggregation: count, enabled: false}\n")
    assert main(["validate", str(rules), "--estimate",
                 str(_sample(tmp_path / "s.jsonl", 30))]) == 0
    assert capsys.readouterr().out == (
        "ok: 1 rules in 1 file(s), 1 disabled\n"
        "estimate: no enabled rule to run on the sample's 30 logs, nothing to estimate\n")


def test_event_times_are_the_parse_stages(tmp_path):
    """The sample's event times are those run_local counts: epoch ms as a number, ISO text
    with a zone; not epoch ms as a string, a bool, 1e20 ms, an object, ISO text without a
    zone or null — and blank lines are not logs."""
    times = [T0 + 5, "2026-11-22T10:00:01.5+01:00", str(T0 + 9_000), True, 1e20,
             {"ms": T0}, "2026-11-22T10:00:02", None, T0 - 250]
    sample = tmp_path / "t.jsonl"
    sample.write_bytes(b"\n".join(orjson.dumps({"@timestamp": t}) for t in times) + b"\n\n")
    read = read_sample([str(sample)], "@timestamp")
    summary = run_local(RunSettings(limits=None).routing(_rules()), read.lines).summary
    assert (read.logs, read.timed) == (summary.logs, summary.parsed)
    assert (read.logs, read.timed, read.first, read.last) == (
        9, 3, T0 - 3_598_500, T0 + 5)


def test_counts_that_disagree_divide_by_nothing():
    """Were the sample's event times and run_local's counts ever to differ, the text has
    no share rather than a ZeroDivisionError."""
    rules = _rules()
    summary = BackfillSummary.for_rules([r for r in rules if r.enabled])
    growths = {r.id: Growth(0, 0, None, None) for r in rules if r.enabled}
    text = report([r for r in rules if r.enabled], summary, growths,
                  Sample([b"{}"], 1, 1, T0, T0 + 1_000), JobConfig())
    assert text[0] == "estimate: 0 logs in the sample, 0 with an event time over 1s — " \
        "0.00 logs/s"
    assert text[4] == "  by-code  counter             0      -       0                 -  -"
