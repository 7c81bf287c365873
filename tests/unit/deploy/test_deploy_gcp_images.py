"""Boot images resolved once through the real Compute client (against the fake GCE) and pinned."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from det.deploy.common.errors import DeployError
from det.deploy.gcp import images
from det.deploy.gcp.config import GPU_IMAGE, UBUNTU_IMAGE, GcpConfig
from tests.fakes.gce import FakeGce

CFG = GcpConfig(cluster_id="c1", project_id="p")
UBUNTU = "projects/ubuntu-os-cloud/global/images/"
DLVM = "projects/deeplearning-platform-release/global/images/"


@pytest.fixture
def gce() -> Iterator[FakeGce]:
    with FakeGce() as fake:
        fake.add_image(
            "ubuntu-os-cloud", "ubuntu-2404-noble-amd64-v20250101", "ubuntu-2404-lts-amd64"
        )
        fake.add_image(
            "deeplearning-platform-release",
            "common-cu129-ubuntu-2404-nvidia-580-v20250102",
            "common-cu129-ubuntu-2404-nvidia-580",
            disk_size_gb=50,
        )
        yield fake


@pytest.fixture
def client(gce: FakeGce) -> Any:
    from google.auth.credentials import AnonymousCredentials

    return images.images_client(AnonymousCredentials(), gce.url)  # type: ignore[no-untyped-call]


def _first_up(client: Any) -> GcpConfig:
    return images.pin(CFG, {}, refresh=False, images_client=lambda: client)


def _outputs(cfg: GcpConfig) -> dict[str, Any]:
    """What the program exports about images (program.build's ``images``/``image_sources``)."""
    return {
        "images": {
            "master": cfg.master_image,
            "aux_agent": cfg.aux_agent_image,
            "compute_agent": cfg.agent_image,
        },
        "image_sources": images.sources(cfg),
    }


def test_first_up_resolves_each_family_to_its_newest_image(gce: FakeGce, client: Any):
    gce.add_image("ubuntu-os-cloud", "ubuntu-2404-noble-amd64-v20250201", "ubuntu-2404-lts-amd64")
    gce.add_image("ubuntu-os-cloud", "ubuntu-2404-broken", "ubuntu-2404-lts-amd64", deprecated=True)
    cfg = _first_up(client)
    assert cfg.master_image == UBUNTU + "ubuntu-2404-noble-amd64-v20250201"
    assert cfg.aux_agent_image == cfg.master_image
    assert cfg.agent_image == DLVM + "common-cu129-ubuntu-2404-nvidia-580-v20250102"
    assert images.sources(cfg) == {
        "master": UBUNTU_IMAGE,
        "aux_agent": UBUNTU_IMAGE,
        "compute_agent": GPU_IMAGE,
    }
    assert images.stack_config(cfg)["det:masterImage"] == (cfg.master_image, False)
    assert {r.kind for r in gce.requests} == {"getFromFamily"}


def test_a_later_up_keeps_the_pinned_images_even_when_the_family_moves(gce: FakeGce, client: Any):
    first = _first_up(client)
    gce.add_image("ubuntu-os-cloud", "ubuntu-2404-noble-amd64-v20250301", "ubuntu-2404-lts-amd64")
    calls = len(gce.requests)
    again = images.pin(CFG, _outputs(first), refresh=False, images_client=lambda: client)
    assert again.master_image == first.master_image
    assert again.agent_image == first.agent_image
    assert len(gce.requests) == calls  # nothing asked of Google


def test_refresh_images_resolves_again(gce: FakeGce, client: Any):
    first = _first_up(client)
    gce.add_image("ubuntu-os-cloud", "ubuntu-2404-noble-amd64-v20250301", "ubuntu-2404-lts-amd64")
    fresh = images.pin(CFG, _outputs(first), refresh=True, images_client=lambda: client)
    assert fresh.master_image == UBUNTU + "ubuntu-2404-noble-amd64-v20250301"


def test_a_changed_agent_image_is_resolved_and_a_concrete_one_used_as_given(
    gce: FakeGce, client: Any
):
    first = _first_up(client)
    mine = "projects/my-proj/global/images/my-agent-v3"
    changed = dataclasses.replace(CFG, agent_image=mine, aux_agent_image=mine)
    calls = len(gce.requests)
    cfg = images.pin(changed, _outputs(first), refresh=False, images_client=lambda: client)
    assert cfg.agent_image == cfg.aux_agent_image == mine
    assert cfg.master_image == first.master_image
    assert len(gce.requests) == calls


def test_unknown_family_is_one_line_naming_it(client: Any):
    cfg = dataclasses.replace(
        CFG, agent_image="projects/deeplearning-platform-release/global/images/family/nope"
    )
    with pytest.raises(DeployError, match=r"^image family 'nope' not found in project "):
        images.pin(cfg, {}, refresh=False, images_client=lambda: client)


def test_only_concrete_images_need_no_client():
    concrete = "projects/x/global/images/y"
    cfg = dataclasses.replace(
        CFG, master_image=concrete, aux_agent_image=concrete, agent_image=concrete
    )

    def no_client() -> Any:
        raise AssertionError("no lookup expected")

    assert images.pin(cfg, {}, refresh=False, images_client=no_client).master_image == concrete


def test_a_boot_disk_smaller_than_the_image_is_refused_before_anything_is_created(client: Any):
    # GCE refuses a boot disk smaller than its image; the Deep Learning VM image is 50 GB.
    small = dataclasses.replace(CFG, disk_size=30)
    with pytest.raises(
        DeployError, match=r"at least 50 GB, and the disk is 30 GB: pass --disk-size 50"
    ):
        images.pin(small, {}, refresh=False, images_client=lambda: client)
    assert images.pin(dataclasses.replace(CFG, disk_size=50), {}, False, lambda: client)
