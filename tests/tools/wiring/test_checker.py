"""Resolving one reference: the namespace it looks in, External objects and their keys, and `optional: true`
references, which must be declared as OptionalRefs.
"""

from __future__ import annotations

from tests.support.wiring_objects import NS, check, config_map, container, deployment, mounted, only, pod_spec, secret
from tools.wiring import External, OptionalRef


def test_missing_namespace_means_default() -> None:
    workload = deployment(pod_spec(container(envFrom=[{"configMapRef": {"name": "c"}}])), ns=None)
    assert only(check(workload, config_map("c", ns=NS))).obj == "Deployment/default/web"
    assert "rendered in namespace 'app'" in only(check(workload, config_map("c", ns=NS))).message
    assert check(workload, config_map("c", ns="default")) == []


def test_external_keys_are_checked_only_when_listed() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "ext", "items": [{"key": "k", "path": "k"}]}})
    documented = External(kind="Secret", namespace=NS, name="ext", keys=frozenset({"other"}), created_by="the user")
    assert "created by the user" in only(check(workload, externals=[documented])).message
    unlisted = External(kind="Secret", namespace=NS, name="ext", created_by="the user")
    assert check(workload, externals=[unlisted]) == []
    with_key = External(kind="Secret", namespace=NS, name="ext", keys=frozenset({"k"}), created_by="the user")
    assert check(workload, externals=[with_key]) == []


def test_external_in_another_namespace_does_not_count() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "ext"}})
    elsewhere = External(kind="Secret", namespace="other", name="ext", created_by="the user")
    assert len(check(workload, externals=[elsewhere])) == 1


OPTIONAL_ENV = [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "authkey", "key": "k", "optional": True}}}]


DECLARED = OptionalRef(namespace=NS, workload="Deployment/web", name="authkey", absence_shown_by="log line")


def test_undeclared_optional_reference_is_a_finding_even_when_present() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    assert "not declared: a pod would run silently without it" in only(check(workload, secret("authkey", "k"))).message
    assert "not rendered" in only(check(workload)).message


def test_declared_optional_reference_may_be_missing() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    assert check(workload, optional_refs=[DECLARED]) == []
    assert check(workload, secret("authkey", "k"), optional_refs=[DECLARED]) == []


def test_declared_optional_reference_still_needs_its_key_when_present() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    assert only(check(workload, secret("authkey", "other"), optional_refs=[DECLARED])).path.endswith(".key")


def test_a_key_a_running_pod_writes_later_may_be_missing_from_an_optional_source() -> None:
    """The kubelet skips an optional volume's missing item (pkg/volume/configmap: `if optional { continue }`): a key
    declared as written at runtime (the witness's recorded position) is not a finding; any other missing key is."""
    items = [{"key": "served", "path": "served"}, {"key": "position", "path": "position"}]
    workload = mounted({"name": "w", "configMap": {"name": "witness", "optional": True, "items": items}})
    plain = OptionalRef(namespace=NS, workload="Deployment/web", name="witness", absence_shown_by="log line")
    later = OptionalRef(
        namespace=NS,
        workload="Deployment/web",
        name="witness",
        absence_shown_by="log line",
        runtime_keys=frozenset({"position"}),
    )
    rendered = config_map("witness", "served")
    assert only(check(workload, rendered, optional_refs=[plain])).path.endswith("items[1].key")
    assert check(workload, rendered, optional_refs=[later]) == []
    assert only(check(workload, config_map("witness", "other"), optional_refs=[later])).path.endswith("items[0].key")


def test_optional_declaration_is_per_workload_and_namespace() -> None:
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    other = OptionalRef(namespace=NS, workload="StatefulSet/web", name="authkey", absence_shown_by="x")
    assert len(check(workload, optional_refs=[other])) == 1


def test_optional_volume() -> None:
    workload = mounted({"name": "s", "secret": {"secretName": "authkey", "optional": True}})
    assert len(check(workload)) == 1
    assert check(workload, optional_refs=[DECLARED]) == []


def test_a_declaration_ending_in_a_star_covers_the_workloads_named_from_their_spec() -> None:
    """A Job named from a checksum of its spec (the migration Job) is declared by the name's fixed part and `*`."""
    workload = deployment(pod_spec(container(env=OPTIONAL_ENV)))
    prefix = OptionalRef(namespace=NS, workload="Deployment/we*", name="authkey", absence_shown_by="log line")
    assert check(workload, optional_refs=[prefix]) == []
    other = OptionalRef(namespace=NS, workload="Deployment/web-*", name="authkey", absence_shown_by="log line")
    assert len(check(workload, optional_refs=[other])) == 1
    literal = OptionalRef(namespace=NS, workload="Deployment/w", name="authkey", absence_shown_by="log line")
    assert len(check(workload, optional_refs=[literal])) == 1, "without the star, the name must match whole"
