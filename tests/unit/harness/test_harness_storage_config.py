"""A ``checkpoint_storage`` block's values are read as what they must be: a value of another
kind is refused, naming its key, before any client is built."""

from __future__ import annotations

import pytest

from det import storage
from det.common.jsontypes import JSONObject


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"type": "s3", "bucket": "b", "prefix": 3}, "prefix"),
        ({"type": "s3", "bucket": "b", "endpoint_url": ["http://x"]}, "endpoint_url"),
        ({"type": "gcs", "bucket": "b", "prefix": {"a": 1}}, "prefix"),
    ],
)
def test_a_storage_value_of_the_wrong_kind_is_refused_naming_its_key(
    config: JSONObject, key: str
) -> None:
    with pytest.raises(ValueError, match=rf"checkpoint_storage\.{key}: expected a string"):
        storage.from_config(config)


def test_a_shortcut_becomes_its_config() -> None:
    assert storage.shortcut_to_config("s3://b/p/q") == {
        "type": "s3",
        "bucket": "b",
        "prefix": "p/q",
    }
    assert storage.shortcut_to_config("/ckpt") == {"type": "directory", "container_path": "/ckpt"}
