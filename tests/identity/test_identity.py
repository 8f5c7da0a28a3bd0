"""The identity program (identity/): the tailnet's keys in a stack of their own, generated once or imported."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from headscale_ha.components.identity import identity_fingerprint
from tools.harness import SECRET, SecretOutput, run_program
from tools.plan import IDENTITY_DIR, IDENTITY_PROJECT, PLACEHOLDERS, plan_identity

NOISE = "privkey:" + "ab" * 32
DERP = "privkey:" + "cd" * 32
PROGRAM = IDENTITY_DIR / "__main__.py"


def _run(config: dict[str, str], secret: tuple[str, ...] = ()) -> object:
    return run_program(
        project=IDENTITY_PROJECT,
        stack="tailnet",
        config={f"{IDENTITY_PROJECT}:{k}": v for k, v in config.items()},
        secret_keys={f"{IDENTITY_PROJECT}:{k}" for k in secret},
        program=PROGRAM,
        stack_outputs={},
    )


def _error(config: dict[str, str], secret: tuple[str, ...] = ()) -> str:
    with pytest.raises(Exception, match="invalid identity config") as caught:
        _run(config, secret)
    return str(caught.value)


def test_the_shipped_stack_generates_both_keys_once_and_protects_them() -> None:
    run = plan_identity()
    keys = run.of_type("random:index/randomBytes:RandomBytes")
    assert sorted(k.name for k in keys) == ["derp-key", "noise-key"]
    assert all(k.protect for k in keys), "destroy and replacement refuse: the bytes exist only in this state"
    assert all(k.inputs["length"] == 32 for k in keys)
    assert run.outputs["identity"] is SECRET
    exported = run.exports["identity"]
    assert isinstance(exported, SecretOutput)
    noise, derp = exported.value["noisePrivateKey"], exported.value["derpPrivateKey"]
    assert noise.startswith("privkey:")
    assert len(noise) == 72
    assert noise != derp
    assert run.outputs["fingerprint"] == identity_fingerprint(noise), "plain, and of the exported Noise key"
    assert [r for r in run.resources if r.type == "pulumi:pulumi:StackReference"] == [], "it references nothing"


def test_imported_keys_replace_the_random_ones() -> None:
    run = _run({"noisePrivateKey": NOISE, "derpPrivateKey": DERP}, secret=("noisePrivateKey", "derpPrivateKey"))
    assert run.of_type("random:index/randomBytes:RandomBytes") == []
    assert run.exports["identity"].value == {"noisePrivateKey": NOISE, "derpPrivateKey": DERP}
    assert run.outputs["fingerprint"] == identity_fingerprint(NOISE)
    assert NOISE not in repr(run.outputs) + repr(run.resources)


def test_imported_keys_from_a_stack_file_plan_with_placeholders(tmp_path: Path) -> None:
    shutil.copy(IDENTITY_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "Pulumi.tailnet.yaml").write_text(
        "config:\n"
        f"  {IDENTITY_PROJECT}:noisePrivateKey:\n    secure: v1:AAAA\n"
        f"  {IDENTITY_PROJECT}:derpPrivateKey:\n    secure: v1:BBBB\n"
    )
    shutil.copy(PROGRAM, tmp_path / "__main__.py")
    run = plan_identity(identity_dir=tmp_path)
    assert run.outputs["fingerprint"] == identity_fingerprint(PLACEHOLDERS[f"{IDENTITY_PROJECT}:noisePrivateKey"]())


@pytest.mark.parametrize(
    ("config", "secret", "expected"),
    [
        ({"noisePrivateKey": NOISE, "derpPrivateKey": DERP}, ("derpPrivateKey",), "noisePrivateKey: must be a secret"),
        (
            {"noisePrivateKey": "privkey:" + "Z" * 64, "derpPrivateKey": DERP},
            ("noisePrivateKey", "derpPrivateKey"),
            "noisePrivateKey: must be 'privkey:' followed by 64 lowercase hex characters, got [secret]",
        ),
        (
            {"noisePrivateKey": NOISE, "derpPrivateKey": NOISE},
            ("noisePrivateKey", "derpPrivateKey"),
            "derpPrivateKey: must differ from noisePrivateKey",
        ),
        ({"noisePrivateKey": NOISE}, ("noisePrivateKey",), "derpPrivateKey: is required with noisePrivateKey"),
        ({"derpPrivateKey": DERP}, ("derpPrivateKey",), "noisePrivateKey: is required with derpPrivateKey"),
        ({"noiseKey": "x"}, (), "noiseKey: unknown key"),
    ],
)
def test_bad_config_is_refused_before_any_resource(config: dict, secret: tuple[str, ...], expected: str) -> None:
    message = _error(config, secret)
    assert f"{IDENTITY_PROJECT}:{expected}" in message
    assert "ZZZZ" not in message
    assert NOISE not in message


@pytest.mark.parametrize("content", [NOISE, NOISE + "\n", f"  {NOISE}\n\n", f"\t{NOISE}\r\n"])
def test_the_fingerprint_is_what_the_restore_script_computes(content: str, tmp_path: Path) -> None:
    """The restore script trims the key file's surrounding whitespace and hashes the rest (printf | sha256sum)."""
    script = Path(__file__).resolve().parents[2] / "components" / "scripts" / "litestream-restore.sh"
    text = script.read_text()
    # The script's own trimming and hashing lines, run on a key file with the Secret's content.
    trim = [line.strip() for line in text.splitlines() if line.strip().startswith('KEY="${KEY')]
    hashing = next(line.strip() for line in text.splitlines() if "sha256sum" in line and "FINGERPRINT=" in line)
    assert len(trim) == 2, "the script trims both ends"
    key_file = tmp_path / "noise.key"
    key_file.write_text(content)
    shell = "\n".join([f'KEY=$(cat "{key_file}")', *trim, hashing, 'printf "%s" "$FINGERPRINT"'])
    result = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True)
    assert result.stdout == identity_fingerprint(content) == identity_fingerprint(NOISE)
