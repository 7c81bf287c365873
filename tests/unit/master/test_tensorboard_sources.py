"""A TensorBoard's sources as its container sees them: each shared_fs host path mounted once,
read-only, at the config's container path (another host path that wants the same one beside
it); object storage untouched."""

from __future__ import annotations

from det.master.services.tensorboards import container_sources


def test_shared_fs_paths_are_mounted_once_each_and_read_only() -> None:
    a = {"type": "shared_fs", "host_path": "/data/a"}
    b = {"type": "shared_fs", "host_path": "/data/b"}
    s3 = {"type": "s3", "bucket": "x", "secret_key": "s"}
    data = {
        "sources": [
            {"experimentId": 1, "trialId": 1, "storage": a},
            {"experimentId": 1, "trialId": 2, "storage": a},
            {"experimentId": 2, "trialId": 3, "storage": b},
            {"experimentId": 3, "trialId": 4, "storage": s3},
        ]
    }
    sources, mounts = container_sources(data)
    assert [s["storage"].get("container_path") for s in sources] == [
        "/determined_shared_fs",
        "/determined_shared_fs",
        "/determined_shared_fs_2",
        None,
    ]
    assert sources[3]["storage"] == s3
    assert mounts == [
        {"hostPath": "/data/a", "containerPath": "/determined_shared_fs", "readOnly": True,
         "propagation": "rprivate"},
        {"hostPath": "/data/b", "containerPath": "/determined_shared_fs_2", "readOnly": True,
         "propagation": "rprivate"},
    ]  # fmt: skip
    assert "container_path" not in a  # the task's data is not changed


def test_a_configured_container_path_is_kept() -> None:
    cfg = {"type": "shared_fs", "host_path": "/data/a", "container_path": "/ckpt"}
    sources, mounts = container_sources({"sources": [{"trialId": 1, "storage": cfg}]})
    assert sources[0]["storage"]["container_path"] == "/ckpt"
    assert [m["containerPath"] for m in mounts] == ["/ckpt"]
