"""The applications' own settings: Headscale (release, storage, DERP, OIDC, overrides) and Headplane."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from headscale_ha.components.config_types import DnsLabel, Duration, Image, Quantity
from headscale_ha.components.settings.base import (
    SUPPORTED_HEADSCALE_MINORS,
    ComputeResources,
    FieldProblem,
    FieldProblemsError,
    ParsableHttpsUrl,
    SettingsModel,
    default_resources,
    go_duration_in_range,
    override_date,
)
from headscale_ha.guardrails.images import ImageRef


class OidcSettings(SettingsModel):
    """OIDC login for Headscale (and Headplane through the same client), restricted to the accounts listed."""

    issuer: ParsableHttpsUrl = Field(description="OIDC issuer URL.")
    client_id: str = Field(min_length=1, description="OIDC client id; the secret is the `oidcClientSecret` key.")
    scope: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"], description="Requested scopes.")
    allowed_domains: list[str] = Field(default_factory=list, description="Only e-mail domains listed may log in.")
    allowed_groups: list[str] = Field(default_factory=list, description="Only members of these groups may log in.")
    allowed_users: list[str] = Field(default_factory=list, description="Only these e-mail addresses may log in.")
    only_start_if_available: bool = Field(
        default=False, description="Refuse to start while the issuer is unreachable (off: start without OIDC login)."
    )
    pkce: bool = Field(default=True, description="Use PKCE (S256).")
    allow_any_account: bool = Field(
        default=False,
        description="Let every account of the identity provider log in and register nodes: OIDC without "
        "`allowedDomains`, `allowedUsers` or `allowedGroups` is refused unless this is true.",
    )
    headplane_api_key_login: bool = Field(
        default=False,
        description="Keep Headplane's API-key login next to OIDC (off: Headplane accepts OIDC logins only).",
    )

    @model_validator(mode="after")
    def _someone_is_allowed(self) -> OidcSettings:
        """Without an allow-list every account of the identity provider could register nodes in the tailnet."""
        if not (self.allowed_domains or self.allowed_users or self.allowed_groups) and not self.allow_any_account:
            raise ValueError(
                "allowedDomains, allowedUsers and allowedGroups are all empty, so any account of the identity "
                "provider could log in and register nodes; list who may log in, or set allowAnyAccount: true "
                "on purpose"
            )
        return self


class DerpSettings(SettingsModel):
    """The DERP relays clients use when a direct connection fails."""

    embedded: bool = Field(default=False, description="Run Headscale's embedded DERP relay (needs UDP 3478 reachable).")
    region_id: int = Field(default=999, ge=900, le=999, description="Region id of the embedded DERP.")
    region_code: DnsLabel = Field(default="headscale", description="Region code of the embedded DERP.")
    urls: list[ParsableHttpsUrl] = Field(
        default_factory=lambda: ["https://controlplane.tailscale.com/derpmap/default"],
        description="DERP maps to load; empty with `embedded` for a private relay only.",
    )

    @model_validator(mode="after")
    def _some_relay(self) -> DerpSettings:
        if not self.urls and not self.embedded:
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("urls",),
                        "is empty and embedded is off: clients would have no DERP relay; list a DERP map or set "
                        "embedded: true",
                        self.urls,
                    )
                ]
            )
        return self


class HeadscaleSettings(SettingsModel):
    """The Headscale server: release, image, resources, storage, DERP, OIDC and overrides."""

    version: str = Field(description="Headscale release, 0.28.x or 0.29.x; selects config keys and API dialect.")
    image: Image = Field(description="Headscale image; its tag must be the `version`.")
    log_level: str = Field(default="info", pattern="^(trace|debug|info|warn|error)$", description="Log level.")
    resources: ComputeResources = Field(
        default_factory=default_resources("50m", "128Mi", "1", "512Mi"), description="Container resources."
    )
    storage_size: Quantity = Field(
        default="1Gi",
        description="Size of the SQLite volume (sqlite stage); at least 3 times recovery.headscaleDatabaseSize, "
        "since a restore holds the verified snapshot beside Litestream's output.",
    )
    ephemeral_inactivity_timeout: Duration = Field(
        default="30m", description="Ephemeral nodes offline this long are removed; more than 65s."
    )
    derp: DerpSettings = Field(default_factory=DerpSettings, description="DERP relays.")
    oidc: OidcSettings | None = Field(default=None, description="OIDC login; off when absent.")
    replicas: int = Field(
        default=1, ge=0, description="1 to serve, 0 to stop; Headscale is a strict singleton, never more than 1."
    )
    allow_empty_start: str | None = Field(
        default=None,
        description="Override after a real loss: a UTC date (YYYY-MM-DD) on which a site that has served (its "
        "ConfigMaps `headscale-served` / `headplane-served` exist) may start Headscale and Headplane empty when both "
        "the data volume and the NFS backup directory are gone. The restore refuses that case (exit 24) and prints "
        "today's date to set here; on any other day the value has no effect, so one left set is inert. Remove it "
        "once the pod has started.",
    )

    allow_downgrade_from: str | None = Field(
        default=None,
        pattern=r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$",
        description="The one downgrade `pulumi up` lets through: from this deployed release to `version`, after "
        "restoring the pre-upgrade snapshot (docs/upgrades.md). Remove it afterwards.",
    )

    @field_validator("allow_empty_start", mode="before")
    @classmethod
    def _utc_date(cls, value: object) -> object:
        return override_date(value)

    @field_validator("replicas")
    @classmethod
    def _singleton(cls, replicas: int) -> int:
        if replicas > 1:
            raise ValueError(
                "would run two Headscale writers: upstream supports one instance only "
                "(SQLite has one writer; node cache, IP allocation and routes live in process memory)"
            )
        return replicas

    @field_validator("ephemeral_inactivity_timeout")
    @classmethod
    def _above_keepalive(cls, timeout: str) -> str:
        return go_duration_in_range(
            timeout,
            above="65s",
            reason="Headscale refuses to start with an ephemeral inactivity timeout of 65s or less "
            "(the 60s keepalive plus a margin)",
        )

    @model_validator(mode="after")
    def _version_matches_image(self) -> HeadscaleSettings:
        minor = ".".join(self.version.split(".")[:2])
        if minor not in SUPPORTED_HEADSCALE_MINORS or len(self.version.split(".")) != 3:
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("version",), "is not supported; use a 0.28.x or 0.29.x release such as 0.29.2", self.version
                    )
                ]
            )
        tag = ImageRef.parse(self.image).tag
        if tag.removeprefix("v").split("-")[0] != self.version:
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("image",),
                        f"has the tag {tag}, which does not match version {self.version}: the image must be that "
                        "release",
                        self.image,
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _downgrade_goes_down(self) -> HeadscaleSettings:
        if self.allow_downgrade_from is not None:

            def key(text: str) -> tuple[int, ...]:
                return tuple(int(part) for part in text.split("."))

            if key(self.allow_downgrade_from) <= key(self.version):
                raise FieldProblemsError(
                    [
                        FieldProblem(
                            ("allowDowngradeFrom",),
                            f"must be newer than version {self.version}: it names the deployed release a downgrade "
                            "leaves",
                            self.allow_downgrade_from,
                        )
                    ]
                )
        return self

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


class HeadplaneSettings(SettingsModel):
    enabled: bool = Field(default=True, description="Deploy the Headplane web UI at `/admin`.")
    image: Image = Field(default="ghcr.io/tale/headplane:0.6.3", description="Headplane image.")
    resources: ComputeResources = Field(
        default_factory=default_resources("50m", "128Mi", "500m", "384Mi"), description="Container resources."
    )
    storage_size: Quantity = Field(
        default="256Mi",
        description="Size of Headplane's own data volume; at least 3 times recovery.headplaneDatabaseSize.",
    )
    oidc_login: bool | None = Field(
        default=None,
        description="Headplane's login through headscale.oidc's identity provider; must be chosen when "
        "headscale.oidc is set. `true`: whoever the provider admits logs in (Headplane 0.6 enforces none of "
        "headscale.oidc's allowed lists, and makes the first login to an empty database its owner: restrict the "
        "client to your admins at the provider). `false`: Headplane's login takes a Headscale API key only.",
    )

    @field_validator("image")
    @classmethod
    def _known_release(cls, image: str) -> str:
        tag = ImageRef.parse(image).tag.removeprefix("v")
        if not tag.startswith("0.6."):
            raise ValueError("only Headplane 0.6.x config keys are known (checked against 0.6.3); pin :0.6.3")
        return image
