"""rayjet's datasets run without Ray Data's console output; nobody else's settings change
(no Spark needed)."""

from __future__ import annotations

import re

import ray

from rayjet.spark import JAVA_OPTIONS, spark_configs
from rayjet.spark.quiet import QUIET_KEY, quiet_dataset, quiet_execution
from rayjet.spark.session import LOG4J_CONFIG

RAY_DATA_OUTPUT = re.compile(r"Running Dataset|Starting execution of Dataset|Execution plan of"
                             r"|execution finished in|Total Progress|Progress bars disabled")


def test_quiet_datasets_print_nothing_and_leave_other_settings(ray_session, capfd,
                                                               ray_data_console):
    capfd.readouterr()
    ds = quiet_dataset(ray.data.range(20))
    assert ds.map(lambda row: row).count() == 20          # derived datasets stay quiet
    theirs = ray.data.range(5)
    with quiet_execution(theirs):
        assert len(theirs.take_all()) == 5
    seen = capfd.readouterr()
    assert not RAY_DATA_OUTPUT.search(seen.out + seen.err), seen.out + seen.err
    assert not [line for line in ray_data_console.take() if RAY_DATA_OUTPUT.search(line)]
    # the user's dataset got its settings back; the process-wide context never changed
    assert theirs.context.enable_progress_bars and theirs.context.print_on_execution_start
    assert theirs.context.get_config(QUIET_KEY) is None
    current = ray.data.DataContext.get_current()
    assert current.enable_progress_bars and current.get_config(QUIET_KEY) is None
    assert len(ray.data.range(3).take_all()) == 3          # theirs is as loud as before
    assert any(RAY_DATA_OUTPUT.search(line) for line in ray_data_console.take())


def test_spark_driver_logs_through_rayjets_config_at_the_session_level():
    configs = spark_configs(log_level="WARN", extra={"spark.driver.extraJavaOptions": "-Dx=1"})
    assert LOG4J_CONFIG.is_file()
    assert configs["spark.log4j.config.file.name"] == str(LOG4J_CONFIG)
    driver = configs["spark.driver.extraJavaOptions"]
    assert driver.startswith(JAVA_OPTIONS) and driver.endswith("-Dx=1")
    assert "-Drayjet.spark.logLevel=warn" in driver
