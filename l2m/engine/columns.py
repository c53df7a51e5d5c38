"""The partials' and samples' columns as Spark sees them: names and Spark types, in order,
and the two columns the streaming read tasks add (:mod:`l2m.engine.streamtask`).

Light on purpose (no Arrow): the Kafka source's schema comes from here, and Spark's driver
asks for it in Python processes of its own, started on every query start.

Input: none. Output: :data:`COLUMNS`, the DDL strings :data:`PARTIAL_SCHEMA` and
:data:`STREAM_PARTIAL_SCHEMA`; :mod:`l2m.engine.partials` derives the Arrow schema and the
key from the same list. Likewise the sample rows the state stage hands the sink:
:data:`SAMPLE_COLUMNS` and :data:`SAMPLE_SCHEMA`, whose Arrow and pandas forms
:mod:`l2m.engine.samples` derives."""

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

# (name, Spark type) of each column of a sample row, the state stage's output and the sink's
# input (meaning: l2m.engine.samples.samples_frame): the sample's Kafka key and JSON value,
# the batch time its record is stamped with, and its remote-write mark.
SAMPLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("key", "string"),
    ("value", "string"),
    ("time", "bigint"),
    ("mark", "string"),
)
# The state stage's rows: a sample each, or in PACK_COLUMN a call's samples together.
SAMPLE_SCHEMA = (", ".join(f"{name} {spark}" for name, spark in SAMPLE_COLUMNS)
                 + f", {PACK_COLUMN} binary")
