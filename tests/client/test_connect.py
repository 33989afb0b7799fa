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

