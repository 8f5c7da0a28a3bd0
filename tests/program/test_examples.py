"""The shipped example values are named, each with its key, wherever they are still set."""

from __future__ import annotations

import pytest

from headscale_ha.program.examples import example_values, is_documentation_address, is_example_name, warning
from tools.availability_docs import stack_config


def test_the_shipped_stacks_name_every_example_value() -> None:
    assert example_values(stack_config("hydra")) == [
        "headscale-ha:tailnet.publicHostname: headscale.example.com",
        "headscale-ha:tailnet.baseDomain: ts.example.com",
        "headscale-ha:tailnet.internalDomain: internal.example.com",
        "headscale-ha:tailnet.users[alice].email: alice@example.com",
        "headscale-ha:tailnet.users[bob].email: bob@example.com",
        "headscale-ha:tailnet.users[carol].email: carol@example.com",
        "headscale-ha:tailnet.sites[hydra].publicAddress: 198.51.100.10",
        "headscale-ha:tailnet.sites[cosmos].publicAddress: 203.0.113.20",
        "headscale-ha:backup.nfs.server: nfs.internal.example.com",
        "headscale-ha:monitoring.runbookUrl: https://git.example.com/platform/headscale-ha/blob/main/docs/operations.md",
    ]
    message = warning(stack_config("cosmos"))
    assert message is not None
    first, *each = message.splitlines()
    assert first == (
        "10 value(s) reserved for documentation or testing are set; clients on the internet cannot reach them "
        "(docs/installation.md, step 2):"
    )
    assert each[0] == "  headscale-ha:tailnet.publicHostname: headscale.example.com (reserved: example name, RFC 2606)"
    assert each[7] == (
        "  headscale-ha:tailnet.sites[cosmos].publicAddress: 203.0.113.20 (reserved: documentation address, RFC "
        "5737/3849)"
    )
    assert len(each) == 10


def test_a_lab_s_test_names_are_called_testing_names_not_shipped_examples(project_copy) -> None:
    """A lab may name its NFS server under `.test` on purpose: the warning says what the name is reserved for."""
    project = project_copy()
    path = project / "Pulumi.yaml"
    path.write_text(path.read_text().replace("nfs.internal.example.com", "nfs.lab.test"))
    message = warning(stack_config("hydra", project))
    assert message is not None
    assert "  headscale-ha:backup.nfs.server: nfs.lab.test (reserved: testing name, RFC 6761: never " in message
    assert "shipped" not in message


@pytest.mark.parametrize(
    ("name", "example"),
    [
        ("headscale.example.com", True),
        ("example.org", True),
        ("nfs.lab.invalid", True),
        ("carol@corp.test", True),
        ("headscale.acme.io", False),
        ("myexample.com", False),
        ("example.com.au", False),
    ],
)
def test_reserved_example_domains_only(name: str, example: bool) -> None:
    assert is_example_name(name) is example


@pytest.mark.parametrize(
    ("address", "documentation"),
    [("198.51.100.10", True), ("192.0.2.1", True), ("2001:db8::1", True), ("198.51.101.1", False), ("nfs", False)],
)
def test_documentation_ranges_only(address: str, documentation: bool) -> None:
    assert is_documentation_address(address) is documentation


def test_a_real_tailnet_has_no_warning(project_copy) -> None:
    project = project_copy()
    path = project / "Pulumi.yaml"
    text = path.read_text()
    for old, new in (
        ("example.com", "acme.io"),
        ("198.51.100.10", "85.10.1.10"),
        ("203.0.113.20", "85.10.2.20"),
    ):
        text = text.replace(old, new)
    path.write_text(text)
    assert warning(stack_config("hydra", project)) is None
