"""A RayDP Spark session on rayjet's Ray cluster, and Ray Dataset <-> Spark conversions.

RayDP runs Spark's driver-side master and executors as Ray actors (JVMs). On Java 17 those
JVMs need ``--add-opens`` flags, and Spark's Python workers must run the driver's Python;
:func:`session` sets both so a user does not have to.

Output: the Spark driver JVM logs through ``log4j2.properties`` beside this module at the
session's ``log_level`` (default ERROR), so Spark's start-up notes and warnings stay off the
console; the info lines Ray's core library prints from that JVM are dropped. The conversions
run without Ray Data's progress output (``progress=True`` keeps it) and without the
deprecation notes RayDP's use of pyspark and Ray internals causes.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray

from rayjet.spark.quiet import quiet_dataset, quiet_execution

# packages RayDP's JVMs reach into by reflection (Java 17 closes them by default)
_OPENS = (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch",
    "sun.nio.cs", "sun.security.action", "sun.util.calendar", "java.math", "java.text",
    "java.time",
)
JAVA_OPTIONS = " ".join(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in _OPENS)
_JVM_OPTION_CONFIGS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)
# blocks handed to Spark: to_spark goes block by block through pandas, tiny blocks are slow
DEFAULT_SPARK_BLOCKS = 2
# the Spark driver's log configuration (RayDP's name for it) and the level it reads
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
_LOG4J_CONFIG_KEY = "spark.log4j.config.file.name"
_LOG_LEVEL_PROPERTY = "rayjet.spark.logLevel"
# an info line of Ray's C++ core: "[2026-01-02 03:04:05,678 I 123 456] gcs_client.cc:96: ..."
_RAY_CORE_INFO = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ I \d+ \d+\] ")


def spark_configs(executor_cpu: float | None = 0.5, extra: dict[str, str] | None = None,
                  log_level: str = "ERROR") -> dict[str, str]:
    """The Spark configs :func:`session` passes to RayDP (Java 17 flags, small defaults,
    the driver's log configuration at ``log_level``)."""
    configs: dict[str, str] = {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "512m",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }
    if executor_cpu is not None:
        configs["spark.ray.raydp_spark_executor.actor.resource.cpu"] = str(executor_cpu)
    for key in _JVM_OPTION_CONFIGS:
        configs[key] = JAVA_OPTIONS
    configs[_LOG4J_CONFIG_KEY] = str(LOG4J_CONFIG)
    configs["spark.driver.extraJavaOptions"] += f" -D{_LOG_LEVEL_PROPERTY}={log_level.lower()}"
    for key, value in (extra or {}).items():
        if key in _JVM_OPTION_CONFIGS:
            value = f"{configs[key]} {value}"  # keep the flags RayDP needs
        configs[key] = str(value)
    return configs


def _prepare_environment() -> None:
    # Spark's Python workers (to_spark, UDFs) must import ray and pyspark: the venv's python.
    # The JVMs get the --add-opens flags through the three *.extraJavaOptions configs.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def session(app_name: str = "rayjet", *, num_executors: int = 1, executor_cores: int = 1,
            executor_memory: str | int = "500M", executor_cpu: float | None = 0.5,
            configs: dict[str, str] | None = None, fault_tolerant_mode: bool = True,
            log_level: str = "ERROR", js: Any = None) -> Any:
    """Start a RayDP Spark session on the Ray cluster rayjet uses and return it.

    Defaults suit a small machine: one executor with one core and 500 MB (RayDP's minimum
    is about 450 MB), holding half a Ray CPU so stream actors keep room. Ray is joined (or
    started) through ``rayjet.connect()`` when it is not running yet. Stop the session with
    :func:`stop_session` (``raydp.stop_spark()``); only one RayDP session can run per Ray
    namespace at a time.

    ``log_level`` is the Spark driver's log level from its start (through rayjet's log4j2
    configuration; ``configs={"spark.log4j.config.file.name": path}`` uses another file)
    and ``sparkContext.setLogLevel`` afterwards: ERROR keeps Spark's start-up notes and
    warnings off the console, "WARN" or "INFO" bring them back.
    """
    import raydp

    if not ray.is_initialized():
        import rayjet

        js = js or rayjet.connect()
    _prepare_environment()
    with _ray_core_info_dropped_from_children():
        spark = raydp.init_spark(app_name, num_executors=num_executors,
                                 executor_cores=executor_cores,
                                 executor_memory=executor_memory,
                                 fault_tolerant_mode=fault_tolerant_mode,
                                 configs=spark_configs(executor_cpu, configs, log_level))
    spark.sparkContext.setLogLevel(log_level)
    return spark


@contextmanager
def _ray_core_info_dropped_from_children() -> Iterator[None]:
    """Processes started inside the block (the Spark driver JVM) write their stderr through
    a pipe that drops the info lines of Ray's C++ core and passes everything else on.

    RayDP joins Ray from that JVM, and Ray's core prints info lines on stderr before it
    reads any log setting (``RAY_BACKEND_LOG_LEVEL`` comes too late), so they can only be
    dropped on the way. This process's own stderr is restored when the block ends."""
    sys.stderr.flush()
    console = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=_forward_stderr, args=(read_end, console), daemon=True,
                     name="rayjet-spark-stderr").start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(console, 2)


def _forward_stderr(read_end: int, console: int) -> None:
    with os.fdopen(read_end, "rb") as lines, os.fdopen(console, "wb") as out:
        for line in lines:
            if not _RAY_CORE_INFO.match(line):
                out.write(line)
                out.flush()


class _HideRayDeprecationNotes(logging.Filter):
    """Ray's notes that a library reached into ``ray.worker`` (RayDP does)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("DeprecationWarning: `ray.")


@contextmanager
def _raydp_notes_hidden() -> Iterator[None]:
    """Hide the deprecation notes RayDP's conversions cause by using pyspark and Ray
    internals: they are about RayDP's code, nothing a caller can change."""
    ray_logger = logging.getLogger("ray")
    note_filter = _HideRayDeprecationNotes()
    ray_logger.addFilter(note_filter)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"DataFrame\.sql_ctx", category=UserWarning)
            yield
    finally:
        ray_logger.removeFilter(note_filter)


def stop_session() -> None:
    """Stop the RayDP Spark session started by :func:`session` (safe when none runs)."""
    import raydp

    raydp.stop_spark()


def to_spark(ds: ray.data.Dataset, spark: Any, *, blocks: int | None = DEFAULT_SPARK_BLOCKS,
             progress: bool = False) -> Any:
    """A Spark DataFrame of a Ray Dataset (through RayDP), first repartitioned into
    ``blocks`` blocks: RayDP converts block by block, and many small blocks are slow.
    ``blocks=None`` hands the blocks over as they are; RayDP needs each of them to hold one
    Arrow chunk per column (a Ray block glued from several tables does not).
    The conversion runs without Ray Data's progress output unless ``progress``; ``ds``
    keeps its own settings afterwards."""
    with quiet_execution(ds, progress), _raydp_notes_hidden():
        if blocks:
            ds = ds.repartition(blocks)
        return ds.to_spark(spark)


def from_spark(df: Any, parallelism: int | None = None, *, progress: bool = False
               ) -> ray.data.Dataset:
    """A Ray Dataset of a Spark DataFrame of a RayDP session (``parallelism`` blocks),
    executing without Ray Data's progress output unless ``progress``."""
    from raydp.spark import from_spark_recoverable

    if parallelism is None:
        parallelism = max(1, min(df.rdd.getNumPartitions(), 8))
    with _raydp_notes_hidden():
        return quiet_dataset(from_spark_recoverable(df, parallelism=parallelism), progress)


def is_spark_dataframe(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"


__all__ = ["JAVA_OPTIONS", "from_spark", "is_spark_dataframe", "session", "spark_configs",
           "stop_session", "to_spark"]
