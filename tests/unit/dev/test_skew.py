"""l2m.dev.skew: the --skew syntax (a bad one refused with one line naming the forms), each
skew's partition shares, exact counts by largest remainders, and the interleaved partition
order the load generator cycles through."""

from __future__ import annotations

import itertools

import pytest

from l2m.dev.skew import Skew, parse_skew, partition_counts, schedule
from l2m.errors import ConfigError


@pytest.mark.parametrize("text, skew", [
    ("uniform", Skew()),
    (" Uniform ", Skew()),
    ("hot:0.7", Skew("hot", hot_share=0.7)),
    ("hot:0.05", Skew("hot", hot_share=0.05)),
    ("zipf:1.2", Skew("zipf", zipf_s=1.2)),
    ("ZIPF:2", Skew("zipf", zipf_s=2.0)),
    ("zipf:100", Skew("zipf", zipf_s=100.0)),
])
def test_the_three_forms_are_read(text: str, skew: Skew) -> None:
    assert parse_skew(text) == skew


@pytest.mark.parametrize("text", ["", "hot", "hot:", "hot:0", "hot:1", "hot:1.5", "hot:-0.2",
                                  "hot:nan", "hot:inf", "hot:70%", "zipf", "zipf:0",
                                  "zipf:-1", "zipf:101", "zipf:inf", "uniform:0.5", "zipfy",
                                  "hot:0.7:1", "héт:0.7", "hot:\x000.7"])
def test_anything_else_is_refused_with_the_forms(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_skew(text)
    assert str(caught.value) == ("--skew: expected uniform, hot:SHARE (0 < SHARE < 1) or "
                                 f"zipf:S (0 < S <= 100), got {text!r}")


def test_weights() -> None:
    assert Skew().weights(4) == [0.25] * 4
    assert Skew("hot", hot_share=0.7).weights(4) == pytest.approx([0.7, 0.1, 0.1, 0.1])
    assert Skew("hot", hot_share=0.7).weights(1) == [1.0]
    zipf = Skew("zipf", zipf_s=1.0).weights(3)
    assert zipf == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    with pytest.raises(ValueError):
        Skew().weights(0)


def test_labels_and_text_round_trip() -> None:
    for skew, label in ((Skew(), "uniform"), (Skew("hot", hot_share=0.7), "hot 70%"),
                        (Skew("zipf", zipf_s=1.2), "zipf s=1.2")):
        assert skew.label == label
        assert parse_skew(skew.text) == skew


def test_partition_counts_are_exact_by_largest_remainders() -> None:
    assert partition_counts(10, [0.7, 0.1, 0.1, 0.1]) == [7, 1, 1, 1]
    assert partition_counts(7, [0.25] * 4) == [2, 2, 2, 1]
    assert partition_counts(11, [6 / 11, 3 / 11, 2 / 11]) == [6, 3, 2]
    assert partition_counts(0, [0.5, 0.5]) == [0, 0]


def test_the_schedule_follows_the_counts_interleaved() -> None:
    order = schedule(Skew("hot", hot_share=0.7).weights(4), 1000)
    assert len(order) == 1000
    assert [order.count(p) for p in range(4)] == [700, 100, 100, 100]
    # any 100 logs in a row (the cycle wrapping too) carry 70 ± 1 of the hot partition's
    ring = order + order[:100]
    assert {ring[i:i + 100].count(0) for i in range(1000)} <= {69, 70, 71}
    # and no run of one cold partition
    assert all(not (a == b != 0) for a, b in itertools.pairwise(ring))


def test_a_uniform_schedule_round_robins() -> None:
    assert schedule(Skew().weights(3), 6) == [0, 1, 2, 0, 1, 2]
