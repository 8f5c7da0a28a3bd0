"""Value types of the stack config: image references, quantities, durations."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from headscale_ha.components.config_types import (
    Duration,
    Fqdn,
    Image,
    PostgresImage,
    quantity_value,
)
from headscale_ha.guardrails.images import ImageRef
from headscale_ha.policy.values import go_duration_ns


@pytest.mark.parametrize(
    ("reference", "repository", "tag", "digest"),
    [
        ("ghcr.io/juanfont/headscale:0.29.2", "ghcr.io/juanfont/headscale", "0.29.2", None),
        ("registry:5000/team/app:v1.2.3", "registry:5000/team/app", "v1.2.3", None),
        ("registry:5000/team/app", "registry:5000/team/app", "", None),
        ("docker.io/x/y:1.0.0@sha256:" + "a" * 64, "docker.io/x/y", "1.0.0", "sha256:" + "a" * 64),
    ],
)
def test_image_reference_is_split_at_the_right_colon(reference: str, repository: str, tag: str, digest: str | None):
    ref = ImageRef.parse(reference)
    assert (ref.repository, ref.tag, ref.digest) == (repository, tag, digest)
    assert str(ref) == reference or not tag


@pytest.mark.parametrize("tag", ["1.2.3", "v1.82.5", "1.8.0.1", "0.7.0-beta.4", "0.28.0-debug"])
def test_exact_version_tags_are_accepted(tag: str) -> None:
    assert TypeAdapter(Image).validate_python(f"example.org/app:{tag}") == f"example.org/app:{tag}"


@pytest.mark.parametrize("tag", ["latest", "Latest", "next", "stable-alpine", "1", "1.2", "sha-abc123"])
def test_moving_or_partial_tags_are_refused(tag: str) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(Image).validate_python(f"example.org/app:{tag}")


def test_registry_port_is_not_mistaken_for_a_tag() -> None:
    with pytest.raises(ValidationError, match="has no tag"):
        TypeAdapter(Image).validate_python("registry:5000/team/app")


def test_postgres_images_pin_major_minor() -> None:
    assert TypeAdapter(PostgresImage).validate_python("ghcr.io/cloudnative-pg/postgresql:15.18")
    with pytest.raises(ValidationError, match="not an exact version"):
        TypeAdapter(PostgresImage).validate_python("ghcr.io/cloudnative-pg/postgresql:15")


@pytest.mark.parametrize(
    ("quantity", "value"), [("250m", 0.25), ("2", 2.0), ("512Mi", 512 * 2**20), ("1G", 1e9), ("1.5Gi", 1.5 * 2**30)]
)
def test_quantities_compare_by_value(quantity: str, value: float) -> None:
    assert quantity_value(quantity) == pytest.approx(value)


@pytest.mark.parametrize(("duration", "seconds"), [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("0", 0)])
def test_go_durations(duration: str, seconds: float) -> None:
    assert TypeAdapter(Duration).validate_python(duration) == duration
    assert go_duration_ns(duration) == seconds * 10**9


@pytest.mark.parametrize("duration", ["30", "1 h", "1d", "m5", ""])
def test_bad_durations_are_refused(duration: str) -> None:
    with pytest.raises(ValidationError, match="Go duration"):
        TypeAdapter(Duration).validate_python(duration)


def test_fqdn_drops_a_trailing_dot_and_refuses_single_labels() -> None:
    assert TypeAdapter(Fqdn).validate_python("hs.example.com.") == "hs.example.com"
    for bad in ("localhost", "Hs.Example.com", "a..b", "-x.example.com"):
        with pytest.raises(ValidationError):
            TypeAdapter(Fqdn).validate_python(bad)


@pytest.mark.parametrize(
    ("kind", "reference"),
    [
        ("Image", "ghcr.io/tale/headplane:0.6.3@sha256:" + "0123456789abcdef" * 4),
        ("Image", "registry.local:5000/team/socat:1.8.0.1@sha256:" + "f" * 64),
        ("PostgresImage", "ghcr.io/cloudnative-pg/postgresql:15.18@sha256:" + "a" * 64),
    ],
)
def test_digest_pins_are_accepted_by_every_image_type(kind: str, reference: str) -> None:
    from headscale_ha.components import config_types

    assert TypeAdapter(getattr(config_types, kind)).validate_python(reference) == reference


@pytest.mark.parametrize(
    ("reference", "fragment"),
    [
        ("ghcr.io/tale/headplane@sha256:" + "0" * 64, "has no tag"),  # the tag says which release it is
        ("ghcr.io/tale/headplane:0.6.3@sha256:" + "0" * 63, "64 lowercase hex"),
        ("ghcr.io/tale/headplane:0.6.3@sha512:" + "0" * 64, "sha256:"),
    ],
)
def test_malformed_digest_pins_are_refused(reference: str, fragment: str) -> None:
    from headscale_ha.components.config_types import Image

    with pytest.raises(ValidationError, match=fragment):
        TypeAdapter(Image).validate_python(reference)
