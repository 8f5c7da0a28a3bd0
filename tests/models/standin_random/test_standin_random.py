"""standin-random under the real Pulumi engine: the stand-in for pulumi-random behaves as the program needs.

An inline program (the Automation API; the real CLI built from source) makes a RandomPassword and a RandomBytes as
the components do. The engine finds ``pulumi-resource-random`` on PATH, so every step below is the engine talking
to the stand-in over the real protocol: create, secret outputs in the state file, an unchanged second ``up``, a
replacement previewed and then done for a new length, a check failure that names the property, and ``destroy``.
"""

from __future__ import annotations

import os
import string
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_random as random
import pytest
from pulumi import automation as auto

from tests.models.standin_random import PLUGIN_DIR
from tests.models.standin_random.generate import BCRYPT_COST, BCRYPT_PREFIX, HAS_BCRYPT, bcrypt_matches
from tests.models.standin_random.resources import BYTES, PASSWORD
from tests.models.standin_random.wire import SECRET_SIG, SIG_KEY
from tools import real_tools

pytestmark = pytest.mark.real_tool("pulumi")

#: What the engine's summaries count: the stack, the password, the bytes (not the default provider).
RESOURCES = 3


def program(length: int = 32) -> Callable[[], None]:
    """The components' two uses of pulumi-random (components/postgres.py, components/headscale.py), exported."""

    def run() -> None:
        password = random.RandomPassword("password", length=length, special=False)
        key = random.RandomBytes("key", length=32)
        pulumi.export("password", password.result)
        pulumi.export("bcrypt", password.bcrypt_hash)
        pulumi.export("hex", key.hex)
        pulumi.export("base64", key.base64)

    return run


@pytest.fixture
def stack(tmp_path: Path) -> auto.Stack:
    """A fresh stack on a file backend in ``tmp_path``, its engine the real CLI, the stand-in first on PATH."""
    (tmp_path / "state").mkdir()
    env = {
        "PULUMI_BACKEND_URL": (tmp_path / "state").as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": "standin-random",
        "PULUMI_HOME": str(tmp_path / "home"),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # The plugin must come from PATH: never a download of the real one behind the lab's back.
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PATH": os.pathsep.join([str(PLUGIN_DIR), str(real_tools.bin_dir()), os.environ.get("PATH", "")]),
    }
    options = auto.LocalWorkspaceOptions(
        work_dir=str(tmp_path),
        env_vars=env,
        pulumi_command=auto.PulumiCommand(str(real_tools.bin_dir().parent), skip_version_check=True),
    )
    return auto.create_or_select_stack("lab", project_name="standin-random", program=program(), opts=options)


def counts(changes: Mapping[Any, int] | None) -> dict[str, int]:
    """An operation summary with plain string keys (the Automation API's are sometimes OpType members)."""
    return {str(getattr(op, "value", op)): count for op, count in (changes or {}).items()}


def resource(deployment: dict[str, Any], token: str) -> dict[str, Any]:
    (found,) = [entry for entry in deployment.get("resources", []) if entry["type"] == token]
    return found


def checkpoint(backend: Path) -> str:
    """The stack's state file as the file backend stored it (not an export, which decrypts)."""
    (path,) = backend.glob(".pulumi/stacks/**/lab.json")
    return path.read_text()


def test_up_creates_both_with_secret_values_and_a_second_up_changes_nothing(stack: auto.Stack, tmp_path: Path) -> None:
    created = stack.up()
    assert counts(created.summary.resource_changes) == {"create": RESOURCES}
    outputs = created.outputs
    password = outputs["password"].value
    assert len(password) == 32
    assert set(password) <= set(string.ascii_letters + string.digits)  # special=False
    assert all(outputs[name].secret for name in ("password", "bcrypt", "hex", "base64"))
    assert len(bytes.fromhex(outputs["hex"].value)) == 32
    if HAS_BCRYPT:  # the real algorithm is available here: the hash is of the password
        assert outputs["bcrypt"].value.startswith(f"{BCRYPT_PREFIX}{BCRYPT_COST}$")
        assert bcrypt_matches(password, outputs["bcrypt"].value)

    # The engine keeps them secret: export (which the Automation API runs with --show-secrets) shows them marked
    # secret, and the state file holds only their ciphertext.
    deployment = stack.export_stack().deployment
    for token, keys in ((PASSWORD, ("result", "bcryptHash")), (BYTES, ("base64", "hex"))):
        stored = resource(deployment, token)["outputs"]
        assert all(stored[key].get(SIG_KEY) == SECRET_SIG for key in keys), f"{token}: {keys} not all secret"
    state = checkpoint(tmp_path / "state")
    for name in ("password", "bcrypt", "hex"):
        assert outputs[name].value not in state, f"{name} is in the state file in plaintext"
    # As the real pulumi-random (computeRandomBytesID): the bytes' resource ID *is* their base64, in plaintext.
    assert resource(deployment, BYTES)["id"] == outputs["base64"].value
    assert state.count(outputs["base64"].value) == 1
    assert resource(deployment, PASSWORD)["id"] == "none"

    again = stack.up()
    assert counts(again.summary.resource_changes) == {"same": RESOURCES}
    assert again.outputs["password"].value == password


def test_a_new_length_is_previewed_as_a_replacement_then_replaces_and_destroy_deletes(stack: auto.Stack) -> None:
    first = stack.up().outputs

    preview = stack.preview(program=program(length=24))
    assert counts(preview.change_summary) == {"replace": 1, "same": RESOURCES - 1}

    replaced = stack.up(program=program(length=24))
    assert counts(replaced.summary.resource_changes) == {"replace": 1, "same": RESOURCES - 1}
    password = replaced.outputs["password"].value
    assert len(password) == 24
    assert password != first["password"].value
    assert replaced.outputs["hex"].value == first["hex"].value  # the bytes did not change

    destroyed = stack.destroy()
    assert counts(destroyed.summary.resource_changes) == {"delete": RESOURCES}
    assert stack.export_stack().deployment.get("resources", []) == []


def test_an_invalid_length_fails_the_preview_naming_the_property(stack: auto.Stack) -> None:
    def too_short() -> None:
        random.RandomPassword("password", length=4, min_upper=3, min_numeric=3)

    with pytest.raises(auto.CommandError) as failed:
        stack.preview(program=too_short)
    assert "must be at least sum of min_upper + min_numeric, got: 4" in str(failed.value)
    assert "Examine values at 'password.length'" in str(failed.value)
