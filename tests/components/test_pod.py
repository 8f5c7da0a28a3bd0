"""components/pod.py: the name an output reads from an object's metadata (``object_name``)."""

from __future__ import annotations

import pytest
from pulumi_kubernetes.meta.v1.outputs import ObjectMeta

from headscale_ha.components.pod import object_name


def test_the_name_is_the_metadata_name() -> None:
    assert object_name(ObjectMeta(name="headscale", namespace="tailnet")) == "headscale"


@pytest.mark.parametrize("name", [None, ""])
def test_an_object_without_a_name_is_refused_rather_than_output_as_none(name: str | None) -> None:
    with pytest.raises(ValueError, match=r"no metadata\.name"):
        object_name(ObjectMeta(name=name, namespace="tailnet"))
