"""What every package component does around its Python component: the facade's `dependsOn` reaches every
resource below it, and the outputs are attributes and registered outputs at once."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from headscale_ha.package.host import COMPONENTS
from tests.support.component_run import build_component
from tests.support.package_samples import SAMPLES, Sample

BY_TOKEN = {f"headscale-ha:index:{c.__name__}": c for c in COMPONENTS}


def _descendants(resources: list, root_urn: str) -> list:
    below, inside = [], {root_urn}
    for resource in resources:
        if resource.parent_urn in inside:
            inside.add(resource.urn)
            below.append(resource)
    return below


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.token.rsplit(":", 1)[1] for s in SAMPLES])
def test_every_resource_below_a_component_waits_for_what_the_component_depends_on(sample: Sample) -> None:
    """A component's dependsOn alone orders only the component; its children would not wait (the SDK does not
    merge a parent's dependencies into a child's options)."""

    def program() -> None:
        namespace = k8s.core.v1.Namespace("prerequisite", metadata={"name": "headscale"})
        BY_TOKEN[sample.token](sample.name, sample.inputs(), pulumi.ResourceOptions(depends_on=[namespace]))

    run = build_component(program)
    (prerequisite,) = [r for r in run.resources if r.name == "prerequisite"]
    (facade,) = [r for r in run.resources if r.type == sample.token]
    custom = [r for r in _descendants(run.resources, facade.urn) if r.custom]
    assert custom, "the component registers resources"
    assert [r.name for r in custom if prerequisite.urn not in r.dependencies] == []


def test_without_dependencies_the_children_carry_only_their_own() -> None:
    (sample,) = [s for s in SAMPLES if s.token == "headscale-ha:index:BackupVolume"]
    run = build_component(lambda: BY_TOKEN[sample.token](sample.name, sample.inputs()))
    names = {r.urn: r.name for r in run.resources}
    depends = {r.name: sorted(names[u] for u in r.dependencies) for r in run.resources if r.custom}
    assert depends == {"backups-volume": [], "backups-claim": ["backups-volume"]}


def test_an_absent_optional_output_is_none_as_attribute_and_registered() -> None:
    (sample,) = [s for s in SAMPLES if s.token == "headscale-ha:index:BackupVolume"]

    def program() -> None:
        inputs = {**sample.inputs(), "nfs": {"storage_class": "nfs-csi"}}
        volume = BY_TOKEN[sample.token](sample.name, inputs)
        assert volume.volume_name is None  # type: ignore[attr-defined]
        pulumi.export("claim", volume.claim_name)  # type: ignore[attr-defined]

    run = build_component(program)
    assert run.outputs["claim"].startswith("litestream-backup-")
