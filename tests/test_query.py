"""Query compiler without Spark: rejected syntax with positions, the compiled tree, and a
property test that any query either compiles or raises a typed error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.errors import QueryError
from l2m.query import (
    And,
    Clauses,
    Exists,
    FieldUse,
    KeywordEquals,
    KeywordWildcard,
    MatchAll,
    Not,
    Or,
    QueryConfig,
    Range,
    TextPhrase,
    TextWildcard,
    parse_query,
)


def error(query: str) -> tuple[str, int]:
    with pytest.raises(QueryError) as info:
        parse_query(query)
    return info.value.code, info.value.pos


@pytest.mark.parametrize(("query", "code", "pos"), [
    ("a && b", "QUERY_UNSUPPORTED_OPERATOR", 2),
    ("a || b", "QUERY_UNSUPPORTED_OPERATOR", 2),
    ("status:500&&x", "QUERY_UNSUPPORTED_OPERATOR", 10),
    ("!a", "QUERY_UNSUPPORTED_OPERATOR", 0),
    ("a AND !b", "QUERY_UNSUPPORTED_OPERATOR", 6),
    ("foo~", "QUERY_UNSUPPORTED", 3),
    ("foo~2", "QUERY_UNSUPPORTED", 3),
    ('msg:"a b"~3', "QUERY_UNSUPPORTED", 9),
    ("", "QUERY_EMPTY", 0),
    ("   ", "QUERY_EMPTY", 0),
    ("a" * 4097, "QUERY_TOO_LONG", 4096),
    ("(" * 65 + "a" + ")" * 65, "QUERY_TOO_DEEP", 64),
    ("NOT " * 300 + "a", "QUERY_TOO_DEEP", 1024),
    ("f:/" + "a" * 257 + "/", "REGEX_TOO_LONG", 2),
    ("f:/ab[c/", "REGEX_INVALID", 5),
    ("f:/a@b/", "QUERY_UNSUPPORTED", 4),
    ("status:500 AND (a OR b", "QUERY_SYNTAX", 15),
    ("a)", "QUERY_SYNTAX", 1),
    ('msg:"unterminated', "QUERY_SYNTAX", 4),
    ("a AND", "QUERY_SYNTAX", 5),
    ("AND a", "QUERY_SYNTAX", 0),
    ("path:/healthz", "QUERY_SYNTAX", 5),
    ("[1 TO 5]", "QUERY_UNSUPPORTED", 0),
    ("temp:-5", "QUERY_SYNTAX", 5),
    ("a AND f:+x", "QUERY_SYNTAX", 8),
])
def test_rejected_queries(query: str, code: str, pos: int):
    assert error(query) == (code, pos)


def test_operators_inside_phrases_regexes_and_escapes_are_literal():
    assert parse_query('msg:"a && b!"').root == KeywordEquals("msg", "a && b!")
    assert parse_query("f:a\\!b").root == KeywordEquals("f", "a!b")
    assert parse_query("f:/a|b/").root.pattern == "a|b"


def test_escaped_sign_is_a_value():
    assert parse_query("temp:\\-5").root == KeywordEquals("temp", "-5")
    assert parse_query("f:(-a b)").root == Clauses(
        (), (KeywordEquals("f", "b"),), (KeywordEquals("f", "a"),))


def test_nesting_at_the_limit_compiles():
    assert parse_query("(" * 64 + "a" + ")" * 64).root == TextPhrase("message", ("a",))


def test_compiled_tree_shapes():
    assert parse_query("status:500 AND message:Refused").root == And((
        KeywordEquals("status", "500"), TextPhrase("message", ("refused",))))
    assert parse_query("a AND b OR c").root == Or((
        And((TextPhrase("message", ("a",)), TextPhrase("message", ("b",)))),
        TextPhrase("message", ("c",))))
    assert parse_query("+a -b c").root == Clauses(
        must=(TextPhrase("message", ("a",)),), should=(TextPhrase("message", ("c",)),),
        must_not=(TextPhrase("message", ("b",)),))
    assert parse_query("a NOT b").root == Clauses(
        (), (TextPhrase("message", ("a",)),), (TextPhrase("message", ("b",)),))
    assert parse_query("-status:200").root == Not(KeywordEquals("status", "200"))
    assert parse_query("f:(a OR b)").root == Or((KeywordEquals("f", "a"), KeywordEquals("f", "b")))
    assert parse_query("_exists_:k.ns").root == Exists("k.ns")
    assert parse_query("f:*").root == Exists("f")
    assert parse_query("*").root == MatchAll()
    assert parse_query("x:5^2").root == KeywordEquals("x", "5")
    assert parse_query("f:a\\*b*").root == KeywordWildcard("f", ("a*b", "*"))
    assert parse_query("Err?r*").root == TextWildcard("message", ("err", "?", "r", "*"))


def test_ranges():
    assert parse_query("f:[1 TO 5}").root == Range("f", "1", "5", True, False, True)
    assert parse_query("f:{* TO 5]").root == Range("f", None, "5", False, True, True)
    assert parse_query("f:[a TO m]").root == Range("f", "a", "m", True, True, False)
    assert parse_query("f:[1 TO m]").root == Range("f", "1", "m", True, True, False)
    assert parse_query("f:[-5 TO 5]").root == Range("f", "-5", "5", True, True, True)
    assert parse_query("f:>=10").root == Range("f", "10", None, True, False, True)
    assert parse_query("f:<b").root == Range("f", None, "b", False, False, False)


def test_default_and_text_fields_are_configurable():
    config = QueryConfig(text_fields=("msg", "body"), default_fields=("msg", "body"))
    assert parse_query("Oops", config).root == Or((
        TextPhrase("msg", ("oops",)), TextPhrase("body", ("oops",))))
    assert parse_query("message:Oops", config).root == KeywordEquals("message", "Oops")


def test_fields_used_are_collected_per_form():
    compiled = parse_query('status:[500 TO 599] AND message:"x y" AND _exists_:a AND b:c*')
    assert sorted(compiled.fields, key=lambda u: u.path) == [
        FieldUse("a", exists=True),
        FieldUse("b", string=True),
        FieldUse("message", text=True),
        FieldUse("status", number=True),
    ]


ATOMS = st.sampled_from([
    "a", "B", "status:500", 'msg:"x y"', "f:*", "_exists_:g", "f:[1 TO 5]", "f:{a TO *]",
    "f:>=3", "x*", "f:/a.c/", "&&", "||", "!", "~", "~2", "^2", "(", ")", "AND", "OR", "NOT",
    "+", "-", ":", '"', "/", "[", "]", "{", "}", "\\", "*", "?", "TO", " ", "é", "f:(a b)",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(ATOMS, max_size=12).map(" ".join) | st.text(max_size=40))
def test_any_query_compiles_or_raises_a_typed_error(query: str):
    try:
        compiled = parse_query(query)
    except QueryError as exc:
        assert 0 <= exc.pos <= len(query)
        assert exc.message
    else:
        assert compiled.root is not None
