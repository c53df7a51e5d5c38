"""The clause tree of a query as written (l2m/query/clauses.py): each clause's span, kind,
role and compiled node; the same errors as the compiler; the compiler's cache untouched."""

from __future__ import annotations

import pytest

from l2m.errors import QueryError
from l2m.query.clauses import Clause, clause_tree
from l2m.query.compiler import _compiled, normalize, parse_query
from l2m.query.nodes import And, Clauses, KeywordEquals, Not, QueryConfig, TextPhrase


def shape(query: str, config: QueryConfig | None = None) -> list[tuple[int, str, str | None,
                                                                          str, str | None]]:
    """(depth, kind, role, text, field) of every clause, depth first."""
    out = []

    def walk(clause: Clause, depth: int) -> None:
        out.append((depth, clause.kind, clause.role, clause.text(query), clause.field))
        for child in clause.children:
            walk(child, depth + 1)

    walk(clause_tree(query, config), 0)
    return out


def test_and_with_spans_without_the_blanks_luqum_counts():
    assert shape("status:500 AND service:web") == [
        (0, "and", None, "status:500 AND service:web", None),
        (1, "term", None, "status:500", "status"),
        (1, "term", None, "service:web", "service"),
    ]


def test_a_group_s_clauses_take_their_role_and_their_sign():
    assert shape(" +a -b NOT c d") == [
        (0, "group", None, "+a -b NOT c d", None),
        (1, "term", "must", "+a", None),
        (1, "term", "must_not", "-b", None),
        (1, "term", "must_not", "NOT c", None),
        (1, "term", "should", "d", None),
    ]


def test_wrappers_merge_into_the_clause_they_wrap_with_the_wider_span():
    assert shape("service:(cart OR checkout)") == [
        (0, "or", None, "service:(cart OR checkout)", "service"),
        (1, "term", None, "cart", "service"),
        (1, "term", None, "checkout", "service"),
    ]
    tree = clause_tree("status:500^2")
    assert (tree.kind, tree.text("status:500^2"), tree.boost) == ("term", "status:500^2", "2")
    assert shape("(a b) OR NOT c") == [
        (0, "or", None, "(a b) OR NOT c", None),
        (1, "group", None, "(a b)", None),
        (2, "term", "should", "a", None),
        (2, "term", "should", "b", None),
        (1, "not", None, "NOT c", None),
        (2, "term", None, "c", None),
    ]


@pytest.mark.parametrize(("query", "kind"), [
    ("x:[1 TO 5]", "range"), ("x:>=5", "range"), ("x:{a TO *]", "range"),
    ('m:"a b"', "phrase"), ("x:/a.*/", "regex"), ("x:a*", "wildcard"), ("x:a?c", "wildcard"),
    ("message:foo-*", "wildcard"), ("_exists_:f", "exists"), ("f:*", "exists"), ("*", "all"),
    ("x:a\\*", "term"),
])
def test_leaf_kinds(query, kind):
    assert clause_tree(query).kind == kind


def test_every_clause_holds_the_node_it_compiled_to():
    tree = clause_tree("+level:error -service:web refused")
    assert tree.node == Clauses((KeywordEquals("level", "error"),),
                                (TextPhrase("message", ("refused",)),),
                                (KeywordEquals("service", "web"),))
    assert [c.node for c in tree.children] == [KeywordEquals("level", "error"),
                                               KeywordEquals("service", "web"),
                                               TextPhrase("message", ("refused",))]
    nested = clause_tree("a:1 AND (b:2 AND NOT NOT c:3)")
    assert normalize(nested.node) == parse_query("a:1 AND (b:2 AND NOT NOT c:3)").root
    assert nested.node == And((KeywordEquals("a", "1"), And((KeywordEquals("b", "2"),
                                                             Not(Not(KeywordEquals("c", "3")))))))


def test_bare_terms_search_the_default_fields():
    config = QueryConfig(text_fields=("message", "msg"), default_fields=("message", "msg"))
    tree = clause_tree("refused", config)
    assert tree.field is None
    assert len(tree.node.children) == 2  # type: ignore[attr-defined]


def test_errors_are_the_compiler_s_and_nothing_is_cached():
    for query in ("", "a && b", "a:(", "x~", "f:/a(?=b)/"):
        with pytest.raises(QueryError) as built:
            clause_tree(query)
        with pytest.raises(QueryError) as compiled:
            parse_query(query)
        assert (built.value.code, built.value.pos) == (compiled.value.code, compiled.value.pos)
    before = _compiled.cache_info().currsize
    clause_tree("never:compiled AND before:1")
    assert _compiled.cache_info().currsize == before
