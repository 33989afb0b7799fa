"""Arrow arrays built without pyarrow's pandas probe: the same arrays ``pa.array`` makes,
and the store, delivery and publish paths of a replica never import pandas (which costs a
replica host ~0.25 s on its first delivery and ~47 MB for good)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.storage import arrow_arrays as arrays


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=20)), max_size=40))
def test_binaries_match_pa_array(values):
    got = arrays.binaries(values)
    got.validate(full=True)
    assert got.equals(pa.array(values, pa.binary()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=10)), max_size=40))
def test_strings_match_pa_array(values):
    got = arrays.binaries(values, pa.string())
    got.validate(full=True)
    assert got.equals(pa.array(values, pa.string()))


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint64(), pa.int32(), pa.float64(),
                                  pa.timestamp("ns", tz="UTC")])
def test_numbers_round_trip(kind):
    values = [0, 5, 7, 1 << 30]
    got = arrays.numbers(values, kind)
    assert got.equals(pa.array(values, kind))
    assert arrays.to_numbers(got).tolist() == values
    assert arrays.to_numbers(got.slice(1, 2)).tolist() == values[1:3]
    assert arrays.to_numbers(arrays.empty(kind)).tolist() == []


def test_to_numbers_fills_nulls():
    assert arrays.to_numbers(pa.array([1, None, 3], pa.int32()), fill=-1).tolist() == [1, -1, 3]


def test_numbers_refuse_other_types():
    with pytest.raises(TypeError):
        arrays.numbers([1], pa.string())


def test_replica_paths_never_import_pandas(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from rayjet.clock import ManualClock
        from rayjet.storage import FileStore, StoreConfig, columns
        from rayjet.engine.consumer.types import Delivery
        from rayjet.engine.consumer.delivery_batch import DeliveryBatch
        from rayjet.client.column_publish import call_ranges, messages_table, row_streams
        from rayjet.engine.columnar import message_columns
        from rayjet.client.column_publish import PubAcks

        store = FileStore({str(tmp_path)!r}, StoreConfig(block_size=4096), clock=ManualClock())
        for i in range(50):
            store.store_msg(f"a.{{i % 3}}", b"NATS/1.0\\r\\nK: v\\r\\n\\r\\n" if i % 2 else b"",
                            b"x" * i)
        cols, _ = store.read_columns(1, 50, ">", 100)
        assert cols.num_rows == 50
        assert store.read_columns(60, 70, ">", 10)[0].num_rows == 0
        assert columns.from_rows([1], [2], ["s"], [b""], [b"d"]).num_rows == 1
        ds = [Delivery("a", b"", b"d", "S", "C", i, i, 1, i, 0) for i in range(1, 4)]
        assert DeliveryBatch.of(ds).to_arrow().num_rows == 3
        table = messages_table([("a.1", b"x", {{"Nats-Msg-Id": "1"}}), ("a.2", b"y", None)])
        mc = message_columns(table)
        call_ranges(mc, 0, 2)
        row_streams(mc, lambda s: "S", PubAcks(2))
        print("pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_validity_marks_nulls():
    null = np.array([False, True, False])
    arr = pa.Array.from_buffers(pa.int64(), 3, [arrays.validity(null),
                                               pa.py_buffer(np.arange(3, dtype=np.int64))])
    assert arr.to_pylist() == [0, None, 2]
    assert arrays.validity(np.zeros(3, bool)) is None
