"""The Spark settings every l2m session starts with (l2m.runtime.session), without a JVM."""

from __future__ import annotations

from l2m.runtime.session import BATCH_JIT, session_settings

JAVA = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def test_streaming_jvms_stop_at_c1_and_a_batch_job_s_compile_with_c2():
    streaming, batch = session_settings(), session_settings(jit=BATCH_JIT)
    for key in JAVA:
        assert "-XX:TieredStopAtLevel=1" in streaming[key].split()
        assert "-XX:-DontCompileHugeMethods" in batch[key].split()
        assert not any(o.startswith("-XX:TieredStopAtLevel") for o in batch[key].split())
    # l2m's log4j configuration stays on the driver either way
    assert "-Dlog4j2.configurationFile=" in batch["spark.driver.extraJavaOptions"]


def test_a_job_s_own_spark_settings_win():
    assert session_settings({"spark.executor.extraJavaOptions": "-Dx=1"})[
        "spark.executor.extraJavaOptions"] == "-Dx=1"
