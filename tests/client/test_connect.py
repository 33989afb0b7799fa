import os
import subprocess
import sys
import textwrap

import pytest

import rayjet
from rayjet.errors import BadRequestError


def test_connect_reuses_the_running_ray_and_closes(ray_session, tmp_path):
    data_dir = tmp_path / "data"
    with rayjet.connect(data_dir=data_dir) as js:
        assert data_dir.is_dir()
        assert js.cluster_resources()["CPU"] >= 1
        nodes = js.nodes()
        assert nodes and all("node_id" in n and "labels" in n for n in nodes)
    assert js.closed
    # the session's Ray was not started by connect(), so closing leaves it running
    assert ray_session.is_initialized()
    with pytest.raises(BadRequestError):
        js.nodes()


@pytest.mark.parametrize("address", ["", "   ", 5])
def test_connect_refuses_a_bad_address(address):
    with pytest.raises(BadRequestError) as info:
        rayjet.connect(address)
    assert info.value.err_code == 10003


def test_connect_refuses_an_unusable_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BadRequestError, match="data_dir"):
        rayjet.connect(data_dir=blocker / "sub")


@pytest.mark.parametrize("timeout", [0, -1, "5", True])
def test_connect_refuses_a_bad_timeout(timeout):
    with pytest.raises(BadRequestError, match="timeout"):
        rayjet.connect(timeout=timeout)


def test_a_ray_that_connect_starts_carries_messages_up_to_2mb_in_the_call(tmp_path):
    """A call's result (or argument) of up to 2 MB, a NATS message or an object chunk,
    crosses in the call itself: a 500 KB result leaves no copy in the shared-memory object
    store; a 3 MB one goes there."""
    code = textwrap.dedent("""
        import sys
        import ray
        import rayjet
        js = rayjet.connect(data_dir=sys.argv[1], hosting="dedicated")
        @ray.remote
        def make(n):
            return b"x" * n
        refs = [make.remote(500_000), make.remote(3_000_000)]
        ray.get(refs)
        where = ray.experimental.get_object_locations(refs)
        print([bool(where[r]["node_ids"]) for r in refs])
        js.close()
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[False, True]"
