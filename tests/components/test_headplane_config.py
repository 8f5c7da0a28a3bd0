"""Headplane config renderer: 0.6.3 keys only, secrets only as file paths, no Kubernetes integration."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from headscale_ha.components.headplane_config import (
    HeadplaneConfigInput,
    HeadplanePaths,
    headplane_config_yaml,
    headplane_minor,
    render_headplane_config,
)
from tests.support.headscale_config_samples import OIDC, commented_keys, key_paths, secret_values, stack_config

HEADPLANE_REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "headplane" / "0.6.3"
HEADSCALE_URL = "http://headscale.headscale.svc.cluster.local:8080"
#: Maps whose keys are user data, not config keys.
USER_DATA_MAPS = frozenset({("oidc", "extra_params")})


def _reference(name: str) -> str:
    path = HEADPLANE_REFERENCE / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: the Headplane 0.6.3 reference (../shared/reference) is not on this machine")
    return path.read_text()


def example_keys() -> set[tuple[str, ...]]:
    """Key paths of the 0.6.3 example, its commented-out keys and ``oidc`` block, and the documented ``*_path`` twins.

    The example's OIDC keys are commented out at column 0 (``# issuer: ...``); the ``_path`` twin of a secret key is
    valid only where the 0.6.3 configuration docs list it as a secret path.
    """
    text = _reference("config.example.yaml")
    keys = key_paths(yaml.safe_load(text)) | commented_keys(text)
    _, marker, after = text.partition("\n# oidc:\n")
    assert marker, "the 0.6.3 example has a commented-out oidc block"
    keys |= {("oidc",)} | {("oidc", key) for key in re.findall(r"^# ([a-z_]+):", after, flags=re.MULTILINE)}
    documented = set(re.findall(r"`([a-z_]+_path)`", _reference("docs/configuration/index.md")))
    keys |= {(*path[:-1], f"{path[-1]}_path") for path in keys if f"{path[-1]}_path" in documented}
    return keys


def spec(config: Any, **overrides: Any) -> HeadplaneConfigInput:
    """The renderer's input as the Headplane component builds it from a stack's settings."""
    built = HeadplaneConfigInput(
        image=config.headplane.image,
        public_hostname=config.tailnet.public_hostname,
        headscale_url=HEADSCALE_URL,
        oidc=config.headscale.oidc,
    )
    return replace(built, **overrides)


def render(config: Any, **overrides: Any) -> dict[str, Any]:
    return render_headplane_config(spec(config, **overrides))


# ------------------------------------------------------------------------------------------ upstream keys


def test_example_parser_sees_the_commented_oidc_block_and_secret_paths() -> None:
    keys = example_keys()
    for path in [
        ("server", "cookie_secret"),
        ("server", "cookie_secret_path"),
        ("headscale", "public_url"),
        ("oidc", "issuer"),
        ("oidc", "use_pkce"),
        ("oidc", "client_secret_path"),
        ("oidc", "headscale_api_key_path"),
    ]:
        assert path in keys, path
    assert ("oidc", "prompt") not in keys, "extra_params' example entry is user data, not a key"
    assert ("server", "port_path") not in keys, "only documented secrets have a _path twin"
    assert ("headscale", "api_key_path") not in keys, "headscale.api_key is 0.7+"


@pytest.mark.parametrize("with_oidc", [False, True], ids=["no-oidc", "oidc"])
@pytest.mark.parametrize("minor", ["0.28.0", "0.29.2"])
def test_every_rendered_key_exists_in_the_063_example(with_oidc: bool, minor: str) -> None:
    rendered = render(stack_config(minor, oidc=OIDC if with_oidc else None))
    unknown = sorted(".".join(p) for p in key_paths(rendered, leaves=USER_DATA_MAPS) - example_keys())
    assert not unknown, f"keys not in Headplane 0.6.3's config.example.yaml: {unknown}"
    assert ("oidc" in rendered) is with_oidc


@pytest.mark.parametrize("image", ["ghcr.io/tale/headplane:0.7.0", "ghcr.io/tale/headplane:0.5.10"])
def test_other_headplane_minors_are_refused(image: str) -> None:
    # StackConfig refuses these too; the renderer keeps its own guard for inputs built without validation.
    with pytest.raises(ValueError, match=r"headplane\.image"):
        render(stack_config(), image=image)


def test_patch_releases_and_variants_of_06_are_accepted() -> None:
    config = stack_config(headplane={"image": "ghcr.io/tale/headplane:0.6.2-shell"})
    assert headplane_minor(config.headplane.image) == "0.6"
    assert render(config)["server"]["port"] == 3000


# ------------------------------------------------------------------------------------------ server, headscale


def test_server_listens_on_3000_behind_https_without_the_admin_suffix() -> None:
    server = render(stack_config())["server"]
    assert server == {
        "host": "0.0.0.0",
        "port": 3000,
        "base_url": "https://headscale.example.com",
        "cookie_secret_path": "/etc/headplane/secrets/cookie_secret",
        "cookie_secure": True,
        "data_path": "/var/lib/headplane",
    }


def test_headscale_is_reached_in_cluster_and_shown_publicly() -> None:
    headscale = render(stack_config())["headscale"]
    assert headscale == {"url": HEADSCALE_URL, "public_url": "https://headscale.example.com"}


def test_no_integration_and_no_shared_headscale_config_file() -> None:
    """Headplane has its own Deployment: nothing to signal, no Headscale config file to read or edit."""
    rendered = render(stack_config(oidc=OIDC))
    assert "integration" not in rendered
    assert "config_path" not in rendered["headscale"]
    assert "dns_records_path" not in rendered["headscale"]


def test_paths_follow_the_mounts() -> None:
    paths = HeadplanePaths(data_dir="/data", cookie_secret="/s/cookie", api_key="/s/key", oidc_client_secret="/s/oidc")
    rendered = render(stack_config(oidc=OIDC), paths=paths)
    assert rendered["server"]["data_path"] == "/data"
    assert rendered["server"]["cookie_secret_path"] == "/s/cookie"
    assert rendered["oidc"]["headscale_api_key_path"] == "/s/key"
    assert rendered["oidc"]["client_secret_path"] == "/s/oidc"


# ------------------------------------------------------------------------------------------ OIDC


def test_oidc_reuses_headscales_client_and_reads_secrets_from_files() -> None:
    config = stack_config(oidc={**OIDC, "scope": ["openid", "email", "profile", "groups"]})
    assert render(config)["oidc"] == {
        "enabled": True,
        "issuer": "https://id.example.com/realms/ops",
        "client_id": "headscale",
        "client_secret_path": "/etc/headplane/secrets/oidc_client_secret",
        "headscale_api_key_path": "/etc/headplane/secrets/headscale_api_key",
        "use_pkce": True,
        "scope": "openid email profile groups",
        "disable_api_key_login": True,
    }


def test_with_oidc_api_key_login_is_off_unless_kept_on_purpose() -> None:
    """An API key pasted on the login page would bypass the identity provider and its allow-list."""
    assert render(stack_config(oidc=OIDC))["oidc"]["disable_api_key_login"] is True
    kept = stack_config(oidc={**OIDC, "headplaneApiKeyLogin": True})
    assert render(kept)["oidc"]["disable_api_key_login"] is False
    assert ("oidc", "disable_api_key_login") in example_keys(), "a key of Headplane 0.6.3's example config"


def test_pkce_follows_the_headscale_setting() -> None:
    config = stack_config(oidc={**OIDC, "pkce": False})
    assert render(config)["oidc"]["use_pkce"] is False


def test_no_oidc_block_without_oidc() -> None:
    assert "oidc" not in render(stack_config())


# ------------------------------------------------------------------------------------------ secrets, determinism


def test_secrets_appear_only_as_paths() -> None:
    config = stack_config(oidc=OIDC, embedded=True)
    text = headplane_config_yaml(spec(config))
    secrets = secret_values(config)
    assert len(secrets) >= 3
    for secret in secrets:
        assert secret not in text
    rendered = yaml.safe_load(text)
    assert "cookie_secret" not in rendered["server"]
    assert not {"client_secret", "headscale_api_key"} & set(rendered["oidc"])


def test_yaml_is_the_rendered_mapping_and_identical_every_time() -> None:
    config = stack_config(oidc=OIDC)
    first = headplane_config_yaml(spec(config))
    assert first == headplane_config_yaml(spec(config))
    assert yaml.safe_load(first) == render(config)
    assert first.startswith("# Headplane 0.6.3 config")
