"""Usage errors of the Kafka source and sink are l2m's configuration errors (code CONFIG),
also when Spark reports them from its Python data source process (no JVM here: the text is
the one Spark 4 gives, with the traceback l2m's own code produces)."""

from __future__ import annotations

import traceback

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from l2m.errors import ConfigError
from l2m.kafka.options import SourceOptions
from l2m.kafka.sink import _check
from l2m.runtime.failures import failure


def spark_reports(exc: BaseException) -> str:
    """As an AnalysisException carries a data source's failure to the driver."""
    return ("[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
            + "".join(traceback.format_exception(exc)) + " SQLSTATE: 38000")


@pytest.mark.parametrize("options", [
    {"planner": "fast"}, {"maxRecordsPerTask": "ten"}, {"startingOffsets": "{0: 1}"},
    {"kafka.bootstrap_servers": "b:1"},
])
def test_a_bad_source_option_is_a_config_error_not_a_spark_one(options):
    raw = {"topic": "t", "kafka.bootstrap.servers": "b:1", **options}
    with pytest.raises(ConfigError) as err:
        SourceOptions.parse(raw)
    error = failure(spark_reports(err.value))
    assert error.code == "CONFIG"
    assert error.render().startswith("l2m: error [CONFIG]: l2m-kafka option ")
    assert str(error) == str(err.value)


def test_the_sink_without_key_and_value_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        _check(StructType([StructField("id", LongType())]))
    assert failure(spark_reports(err.value)).render() == (
        "l2m: error [CONFIG]: l2m-kafka-sink needs columns key and value; missing key, value")
