from l2m.semantics.values import (
    label_name,
    lookup,
    number,
    padded_tokens,
    parse_timestamp,
    string_form,
    text_tokens,
)
from l2m.semantics.windows import window_start


def test_lookup_prefers_literal_dotted_key_then_nested_path():
    doc = {"a.b": "literal", "a": {"b": "nested", "c": {"d": 1}}, "n": None, "x.y": None,
           "x": {"y": "deep"}}
    assert lookup(doc, "a.b") == "literal"
    assert lookup(doc, "a.c.d") == 1
    assert lookup(doc, "a.z") is None
    assert lookup(doc, "n") is None
    # null counts as missing, so the nested path is used
    assert lookup(doc, "x.y") == "deep"
    assert lookup({"a": "scalar"}, "a.b") is None


def test_string_form():
    assert string_form("500") == "500"
    assert string_form(500) == "500"
    assert string_form(1.5) == "1.5"
    assert string_form(1.0) == "1.0"
    assert string_form(0.1) == "0.1"
    assert string_form(True) == "true"
    assert string_form(False) == "false"
    assert string_form(None) is None
    assert string_form({"a": 1}) is None
    assert string_form([1]) is None


def test_number_accepts_numbers_and_numeric_strings_only():
    assert number(3) == 3.0
    assert number(2.5) == 2.5
    assert number("12") == 12.0
    assert number("-1.5e3") == -1500.0
    assert number(".5") == 0.5
    assert number("1.") == 1.0
    for bad in ("abc", "", " 1", "1 ", "nan", "inf", "1_000", True, None, [1], "0x10"):
        assert number(bad) is None, bad


def test_text_tokens():
    assert text_tokens("Connection REFUSED: to db-1:5432!") == [
        "connection", "refused", "to", "db", "1", "5432"]
    assert text_tokens("snake_case stays") == ["snake_case", "stays"]
    assert text_tokens("Übergröße café") == ["übergröße", "café"]
    assert padded_tokens("Hello,  World") == " hello world "
    assert padded_tokens("...") == "  "


def test_parse_timestamp():
    assert parse_timestamp(1795169274799) == 1795169274799
    assert parse_timestamp(1795169274799.9) == 1795169274799
    assert parse_timestamp("2026-11-22T10:00:00Z") == 1795341600000
    assert parse_timestamp("2026-11-22T10:00:00.123Z") == 1795341600123
    assert parse_timestamp("2026-11-22T11:00:00.5+01:00") == 1795341600500
    assert parse_timestamp("2026-11-22T04:30:00-05:30") == 1795341600000
    assert parse_timestamp("2026-11-22T10:00:00.123456789Z") == 1795341600123
    for bad in ("2026-11-22T10:00:00", "2026-11-22", "yesterday", "", None, True,
                "1795169274799", {"t": 1}):
        assert parse_timestamp(bad) is None, bad


def test_label_name_and_window():
    assert label_name("kubernetes.namespace") == "kubernetes_namespace"
    assert label_name("@timestamp") == "_timestamp"
    assert label_name("a-b c") == "a_b_c"
    assert window_start(1795341659999) == 1795341600000
    assert window_start(1795341660000) == 1795341660000
    assert window_start(-1) == -60000
