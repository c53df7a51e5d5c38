"""Random logs and random Lucene queries over a few fields whose values cross every type
boundary (numbers as strings, objects, arrays, blanks): the differential tests run them
through a pipeline and through the reference evaluator (tests/support/reference.py)."""

from __future__ import annotations

import random

FIELDS = ["s", "n", "t", "message", "a.b"]
WORDS = ["x", "X", "10", "2.5", "-3", "abc", "Hello", "true", "a b", "é"]


def random_value(rng: random.Random):
    return rng.choice([None, True, False, 0, 10, -3, 2.5, 1.0, "10", "2.5", "abc", "Hello World",
                       "hello", "x", "X y", "a b c", "", "  ", "é!", {"b": "x"}, ["x"]])


def random_doc(rng: random.Random) -> dict:
    doc = {f: random_value(rng) for f in FIELDS if rng.random() < 0.7}
    if rng.random() < 0.3:
        doc["a"] = {"b": random_value(rng)}
    return doc


def random_query(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth < 3 and roll < 0.35:
        op = rng.choice([" AND ", " OR ", " ", " AND NOT "])
        return f"({random_query(rng, depth + 1)}{op}{random_query(rng, depth + 1)})"
    if depth < 3 and roll < 0.45:
        return rng.choice(["NOT ", "-", "+"]) + random_query(rng, depth + 1)
    field = rng.choice([*FIELDS, None])
    prefix = f"{field}:" if field else ""
    word = rng.choice(WORDS)
    kind = rng.random()
    if kind < 0.3:
        return prefix + (f'"{word}"' if " " in word else word)
    if kind < 0.45:
        return prefix + rng.choice(["x*", "*b*", "?", "h*o", "1*", "*"])
    if kind < 0.55 and field:
        regexes = ["x", "[a-z]+", "h.*", "1.?", ".*", "\\w+", "(?i)x", "a{,3}", "[[]", "x|a b",
                   "(a+)+b", "[^a-z]*", "\\pL+", "é?.", "."]
        return f"{prefix}/{rng.choice(regexes)}/"
    if kind < 0.8 and field:
        lo, hi = sorted(rng.sample(["-5", "0", "2.5", "10", "*", "a", "h", "z"], 2))
        return f"{prefix}{rng.choice('[{')}{lo} TO {hi}{rng.choice(']}')}"
    if kind < 0.9 and field:
        return f"{prefix}{rng.choice(['>', '>=', '<', '<='])}{rng.choice(['0', '2.5', 'b'])}"
    return f"_exists_:{rng.choice(FIELDS)}"
