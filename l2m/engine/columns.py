"""The partials' columns as Spark sees them: names and Spark types, in order, and the two
columns the streaming read tasks add (:mod:`l2m.engine.streamtask`).

Light on purpose (no Arrow): the Kafka source's schema comes from here, and Spark's driver
asks for it in Python processes of its own, started on every query start.

Input: none. Output: :data:`COLUMNS`, the DDL strings :data:`PARTIAL_SCHEMA` and
:data:`STREAM_PARTIAL_SCHEMA`; :mod:`l2m.engine.partials` derives the Arrow schema and the
key from the same list."""

from __future__ import annotations

# (name, Spark type) of each partial column, in order (meaning: l2m.engine.partials).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("rule", "string"),
    ("series", "string"),
    ("le", "string"),
    ("window", "bigint"),
    ("matches", "bigint"),
    ("n", "bigint"),
    ("sum", "double"),
    ("exact_sum", "decimal(38,18)"),
    ("exact_n", "bigint"),
    ("min", "double"),
    ("max", "double"),
    ("ts", "bigint"),
)
PARTIAL_SCHEMA = ", ".join(f"{name} {spark}" for name, spark in COLUMNS)
KEY = ["rule", "series", "le", "window"]

RULESET_COLUMN = "ruleset"
PLACE_COLUMN = "place"
# A packed row's partials (l2m.engine.streamtask.packed), or in the state stage's output a
# call's samples (l2m.engine.samples.samples_frame): an Arrow IPC stream (l2m.engine.ipc);
# null in any other row.
PACK_COLUMN = "pack"
# The rule column of a packed row (not a rule id: those never start with "@"; nor "__", which
# marks l2m's own rows, spread by hash).
PACK_RULE = "@pack"
# The streaming source's rows: the partials, the rule set they were made with, their shard,
# and their pack.
STREAM_PARTIAL_SCHEMA = (f"{PARTIAL_SCHEMA}, {RULESET_COLUMN} string, {PLACE_COLUMN} int, "
                         f"{PACK_COLUMN} binary")
