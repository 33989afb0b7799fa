import pytest

from rayjet.api import (
    KeyValueConfig,
    ObjectStoreConfig,
    StreamConfig,
    StreamSource,
    validate_key_value_config,
    validate_object_store_config,
    validate_stream_config,
)
from rayjet.errors import (
    BadBucketNameError,
    BadRequestError,
    InvalidConfigError,
    KeyHistoryTooLargeError,
)


def test_kv_config_defaults_and_normalising():
    cfg = KeyValueConfig(bucket="profiles")
    assert (cfg.history, cfg.replicas, cfg.max_bytes, cfg.max_value_size) == (1, 1, -1, -1)
    assert cfg.ttl is None
    norm = validate_key_value_config(KeyValueConfig(bucket="p_1-x", history=0, replicas=0))
    assert norm.history == 1 and norm.replicas == 1


@pytest.mark.parametrize("cfg, error", [
    (KeyValueConfig(bucket="bad.name"), BadBucketNameError),
    (KeyValueConfig(bucket=""), BadBucketNameError),
    (KeyValueConfig(bucket="b", history=65), KeyHistoryTooLargeError),
    (KeyValueConfig(bucket="b", replicas=6), InvalidConfigError),
    (KeyValueConfig(bucket="b", ttl=-1), InvalidConfigError),
    (KeyValueConfig(bucket="b", limit_marker_ttl=0.5), InvalidConfigError),
])
def test_kv_config_rules(cfg, error):
    with pytest.raises(error):
        validate_key_value_config(cfg)


def test_object_store_rules():
    assert validate_object_store_config(ObjectStoreConfig(bucket="files", replicas=0)).replicas == 1
    for cfg in (ObjectStoreConfig(bucket="a b"), ObjectStoreConfig(bucket="f", replicas=9),
                ObjectStoreConfig(bucket="f", ttl=-5)):
        with pytest.raises(InvalidConfigError):
            validate_object_store_config(cfg)


def test_specific_rows_are_config_errors_with_a_hint():
    with pytest.raises(InvalidConfigError) as exc:
        validate_stream_config(StreamConfig(name="M", subjects=["x"],
                                            mirror=StreamSource(name="O")))
    err = exc.value
    assert isinstance(err, BadRequestError)
    assert err.err_code == 10034 and err.code == 400
    assert "mirror" in err.description and "remove subjects" in str(err)
