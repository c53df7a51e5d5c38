"""Per-tenant visibility (issue 20, deliverable 5) without a JVM: each account's live series,
refusals, samples and matched logs, the top accounts by series named and the rest summed as
one, so l2m's own metrics stay bounded; and the first refusal of a rule per hour as a line."""

from __future__ import annotations

from l2m.runtime.runner import RefusalLog
from l2m.state.accounts import (
    OTHER,
    AccountBook,
    AccountStats,
    account_samples,
    account_totals,
)
from l2m.state.tally import MatchCount, RefusedCount, SampleCount, SeriesCount

ACCOUNTS = {"a1": "acme", "a2": "acme", "g1": "globex", "i1": "initech", "free": None}
LATEST = {SeriesCount("a1", 0, -1): 10, SeriesCount("a2", 0, 5): 5, SeriesCount("g1", 1, -1): 7,
          SeriesCount("i1", 1, -1): 1, SeriesCount("free", 0, -1): 2,
          SeriesCount("__refused__", 0, -1): 1}
SUMS = {MatchCount("a1"): 100, MatchCount("g1"): 50, MatchCount("i1"): 3,
        RefusedCount("a1", "acme", "rule"): 4, RefusedCount("a2", "acme", "account"): 1,
        SampleCount("a1"): 12, SampleCount("i1"): 1, SampleCount("l2m-input"): 9}


def test_the_top_accounts_by_series_are_named_and_the_rest_summed():
    view = AccountBook(top=2).view(account_totals(ACCOUNTS, LATEST, SUMS))
    assert view == {"acme": AccountStats(series=15, refused=5, samples=12, matched=100),
                    "globex": AccountStats(series=7, matched=50),
                    OTHER: AccountStats(series=3, samples=1, matched=3)}
    assert set(AccountBook(top=10).view(account_totals(ACCOUNTS, LATEST, SUMS))) == {
        "acme", "globex", "initech", ""}


def test_the_view_as_samples_of_the_metrics_topic():
    samples = account_samples({"acme": AccountStats(series=15, refused=5)}, 1000)
    assert [(s["name"], s["kind"], s["labels"], s["value"]) for s in samples] == [
        ("l2m_account_series", "gauge", {"account": "acme"}, 15.0),
        ("l2m_account_series_refused_total", "counter", {"account": "acme"}, 5.0),
        ("l2m_account_samples_total", "counter", {"account": "acme"}, 0.0),
        ("l2m_account_logs_matched_total", "counter", {"account": "acme"}, 0.0)]
    assert {s["rule"] for s in samples} == {"l2m-accounts"}


def test_a_rule_over_its_cap_is_logged_once_per_hour():
    now = [0.0]
    log = RefusalLog(clock=lambda: now[0])
    key = RefusedCount("acme/req", "acme", "rule")
    assert log.lines({key: 0}) == []
    [line] = log.lines({key: 3})
    assert "'acme/req' (account acme) is at its rule series cap: 3 log(s)" in line
    now[0] = 1800.0
    assert log.lines({key: 10}) == []
    now[0] = 3700.0
    [line] = log.lines({key: 12})
    assert ": 2 log(s)" in line
    assert log.lines({key: 12}) == []


def test_the_named_accounts_are_sticky_and_the_other_counters_never_go_down():
    book = AccountBook(top=1)
    a = AccountStats(series=100, refused=1000)
    view = book.view({"a": a, "b": AccountStats(series=99, refused=5)})
    assert view == {"a": a, OTHER: AccountStats(series=99, refused=5)}
    # b overtakes a: both named now; __other__ keeps the 5 b counted while outside
    view = book.view({"a": a, "b": AccountStats(series=101, refused=7)})
    assert view == {"a": a, "b": AccountStats(series=101, refused=7),
                    OTHER: AccountStats(series=0, refused=5)}
    view = book.view({"a": a, "b": AccountStats(series=99, refused=9), "c": AccountStats(
        series=1, refused=2)})
    assert view[OTHER] == AccountStats(series=1, refused=7)
    # a new query: the accumulators restart at 0, and __other__ still only grows
    view = book.view({"a": AccountStats(series=100), "b": AccountStats(series=99),
                      "c": AccountStats(series=1, refused=1)})
    assert view[OTHER] == AccountStats(series=1, refused=8)


def test_at_most_twice_the_top_stay_named():
    book = AccountBook(top=2)
    for i in range(10):
        book.view({f"x{j}": AccountStats(series=100 + (j if j <= i else -j)) for j in range(10)})
    assert len(book.named) <= 4
    assert {"x9", "x8"} <= set(book.named)


def test_totals_cover_every_account():
    assert set(account_totals(ACCOUNTS, LATEST, SUMS)) == {"acme", "globex", "initech", ""}


def test_per_account_samples_are_written_off_the_batch_in_order_the_newest_superseding():
    """The batch hands its tallies over and goes on; a batch ending while the previous one's
    samples are still being written replaces what waits; close() writes what is left."""
    import threading

    from l2m.streaming.accountmetrics import AccountMetrics

    entered, release = threading.Event(), threading.Event()
    written: list[dict[str, float]] = []

    def produce(samples: list[dict]) -> None:
        if not written:
            entered.set()
            release.wait(10)  # the first write is slow: batches 2 and 3 end meanwhile
        written.append({s["labels"]["account"]: s["value"] for s in samples
                        if s["name"] == "l2m_account_logs_matched_total"})

    metrics = AccountMetrics(AccountBook(top=10), produce)
    latest = dict(LATEST)
    metrics.batch_done(1, ACCOUNTS, latest, {MatchCount("a1"): 1})
    assert entered.wait(10)
    latest[SeriesCount("g1", 1, -1)] = 8  # the caller's dict changes: the copy does not
    metrics.batch_done(2, ACCOUNTS, latest, {MatchCount("a1"): 2})
    metrics.batch_done(3, ACCOUNTS, latest, {MatchCount("a1"): 3})
    release.set()
    metrics.close()
    assert written == [{"acme": 1, "globex": 0, "initech": 0, "": 0},
                       {"acme": 3, "globex": 0, "initech": 0, "": 0}]
    metrics.batch_done(4, ACCOUNTS, latest, {})  # after close: nothing more is written
    assert len(written) == 2


def test_a_failed_write_of_per_account_samples_is_a_line_and_later_batches_still_write(capsys):
    import threading

    from l2m.streaming.accountmetrics import AccountMetrics

    calls: list[int] = []
    tried = threading.Event()

    def produce(samples: list[dict]) -> None:
        calls.append(len(samples))
        tried.set()
        if len(calls) == 1:
            raise RuntimeError("broker down")

    metrics = AccountMetrics(AccountBook(top=10), produce)
    metrics.batch_done(7, ACCOUNTS, LATEST, dict(SUMS))
    assert tried.wait(10)
    metrics.batch_done(8, ACCOUNTS, LATEST, dict(SUMS))
    metrics.close()
    assert calls == [16, 16]
    assert capsys.readouterr().err == (
        "l2m: the per-account metrics of batch 7 were not written: broker down\n")
