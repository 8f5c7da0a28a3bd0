"""docs/configuration.md's configuration reference is the one generated from StackConfig."""

from __future__ import annotations

from headscale_ha.program.config import StackConfig
from headscale_ha.program.config_problems import SECRET_KEYS
from tools import config_reference
from tools.harness import PROJECT_DIR


def test_the_page_holds_the_generated_reference() -> None:
    page = (PROJECT_DIR / "docs" / "configuration.md").read_text()
    assert config_reference.block() in page, "docs/configuration.md's reference is stale: run `make docs`"


def test_every_key_has_a_type_default_and_meaning() -> None:
    rows = list(config_reference.rows())
    keys = [key for key, *_ in rows]
    assert len(keys) == len(set(keys))
    top_level = {field.alias or name for name, field in StackConfig.model_fields.items()}
    assert top_level <= set(keys)
    assert {"tailnet.sites[].gatewayIp", "headscale.image", "database.stage", "gateway.routers.mode"} <= set(keys)
    for key, type_name, default, meaning in rows:
        assert type_name, key
        assert default, key
        assert meaning, key


def test_secret_keys_are_marked() -> None:
    table = config_reference.table()
    for key in SECRET_KEYS:
        assert f"| `{key}` (secret) |" in table


def test_types_and_defaults_read_as_what_they_are() -> None:
    """A map is a map (not "string or string"), an empty default is said to be empty, an empty list is `[]`."""
    rows = {key: (type_name, default) for key, type_name, default, _ in config_reference.rows()}
    assert rows["monitoring.labels"] == ("map of string to string", "`{}`")
    assert rows["tailnet.users[].email"] == ("string", '`""` (empty)')
    assert rows["cluster.excludeNodes"] == ("list of string", "`[]`")
    for key, (type_name, default) in rows.items():
        parts = type_name.split(" or ")
        assert len(parts) == len(set(parts)), f"{key}: {type_name}"
        assert default != "``", key
