"""Headplane's config.yaml, rendered from the few settings it holds (`HeadplaneConfigInput`).

Pure (no Pulumi, no I/O). Written for Headplane 0.6.x, whose keys are checked against the 0.6.3 example; any other
minor is refused rather than guessed at (0.7 moved the API key to ``headscale.api_key``).

Headplane runs in its own Deployment, not in the Headscale pod, so no integration is configured and no
``headscale.config_path`` is given: Headplane works in its API-only mode. Secrets (cookie secret, Headscale API key,
OIDC client secret) are only ever referenced by the ``*_path`` keys of files on a Secret mount.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from headscale_ha.components.settings import OidcSettings
from headscale_ha.guardrails.images import ImageRef

#: Headplane minor whose config keys this renderer knows (from the 0.6.3 example config).
SUPPORTED_HEADPLANE_MINOR = "0.6"
HTTP_PORT = 3000


@dataclass(frozen=True, kw_only=True)
class HeadplanePaths:
    """Where the Deployment mounts things; the defaults are what the Headplane component uses."""

    data_dir: str = "/var/lib/headplane"  # own SQLite database (hp_persist.db) and caches; persistent volume
    cookie_secret: str = "/etc/headplane/secrets/cookie_secret"  # exactly 32 characters
    api_key: str = "/etc/headplane/secrets/headscale_api_key"  # Headscale API key Headplane calls the API with
    oidc_client_secret: str = "/etc/headplane/secrets/oidc_client_secret"  # the OIDC client's secret


@dataclass(frozen=True, kw_only=True)
class HeadplaneConfigInput:
    """Everything Headplane's config.yaml says, and nothing else."""

    image: str  # the Headplane image; its tag's minor selects the config keys (only 0.6 is known)
    public_hostname: str  # public name of Headscale (`/`) and Headplane (`/admin`); served over HTTPS
    headscale_url: str  # Headscale's in-cluster HTTP address (its Service): API calls stay inside the cluster
    oidc: OidcSettings | None = None  # the OIDC client Headplane shares with Headscale; None: no OIDC login
    paths: HeadplanePaths = field(default_factory=HeadplanePaths)  # where the data volume and secret files are


def headplane_minor(image: str) -> str:
    """The minor version (``0.6``) of a Headplane image's tag."""
    tag = ImageRef.parse(image).tag
    return ".".join(tag.removeprefix("v").split("-")[0].split(".")[:2])


def render_headplane_config(spec: HeadplaneConfigInput) -> dict[str, Any]:
    """Headplane's configuration as a mapping.

    ``spec.headscale_url`` is Headscale's in-cluster address, not the public URL: Headplane's API calls then stay
    inside the cluster. Raises ValueError when the image is not a 0.6 release.
    """
    paths = spec.paths
    minor = headplane_minor(spec.image)
    if minor != SUPPORTED_HEADPLANE_MINOR:
        raise ValueError(
            f"headplane.image {spec.image}: only Headplane {SUPPORTED_HEADPLANE_MINOR}.x config keys are "
            f"known (checked against 0.6.3), got {minor or 'no version'}; pin ghcr.io/tale/headplane:0.6.3"
        )
    public_url = f"https://{spec.public_hostname}"
    rendered: dict[str, Any] = {
        "server": {
            "host": "0.0.0.0",
            "port": HTTP_PORT,
            # Without /admin: Headplane appends its fixed prefix (the OIDC callback is <base_url>/admin/oidc/callback).
            "base_url": public_url,
            "cookie_secret_path": paths.cookie_secret,
            "cookie_secure": True,
            "data_path": paths.data_dir,
        },
        "headscale": {"url": spec.headscale_url, "public_url": public_url},
    }
    oidc = spec.oidc
    if oidc is not None:
        # Same issuer and client as Headscale, as upstream advises; the IdP client needs both callback URLs.
        rendered["oidc"] = {
            "enabled": True,
            "issuer": oidc.issuer,
            "client_id": oidc.client_id,
            "client_secret_path": paths.oidc_client_secret,
            "headscale_api_key_path": paths.api_key,
            "use_pkce": oidc.pkce,
            "scope": " ".join(oidc.scope),
            # With OIDC the login page offers OIDC only: an API key pasted there would bypass the IdP and its
            # allow-list (and a leaked key would be a login). `headscale.oidc.headplaneApiKeyLogin` keeps both.
            "disable_api_key_login": not oidc.headplane_api_key_login,
        }
    return rendered


def headplane_config_yaml(spec: HeadplaneConfigInput) -> str:
    """``render_headplane_config`` as YAML text; the same input always gives the same bytes (stable diffs)."""
    body = yaml.safe_dump(render_headplane_config(spec), sort_keys=False, default_flow_style=False, width=120)
    tag = ImageRef.parse(spec.image).tag
    return f"# Headplane {tag} config, rendered by headscale-ha; edits are overwritten.\n{body}"
