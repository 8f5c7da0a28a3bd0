"""The real Headscale (``make real-tools``) judges the rendered config, the rendered policy and the fake.

- Every Headscale config the plan of each stack renders passes ``headscale configtest`` with its paths mapped into
  a scratch root, and serves; the rendered ACL policy passes ``headscale policy check`` (and a broken one fails it).
- The dynamic providers run one script (tests/support/headscale_parity.py) against the real server and against the
  fake; every answer must agree field by field (where they do not, the fake is wrong).
- A server that stopped gives the provider's error at once, not a hang; one that froze costs a bounded time.
- The release before (0.28.0) is run too, and what the provider sees differ between the releases is written here.

The harness is tests/support/headscale_real.py (what it changes in a rendered config, and why, is in its docstring).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml

from headscale_ha.components.headscale_config import HeadscalePaths
from headscale_ha.provider.client import HeadscaleClient, NotFoundError, TransientError, VersionMismatchError
from headscale_ha.provider.resources import PolicyProvider, UserProvider
from tests.models.headscale import FakeHeadscale
from tests.support.headscale_parity import (
    BROKEN_POLICY,
    OTHER_POLICY,
    POLICY,
    USER,
    Transcript,
    client_for,
    differing_steps,
    disagreements,
    provider_lifecycle,
)
from tests.support.headscale_real import (
    PREVIOUS,
    RealHeadscale,
    binary,
    configtest,
    headscale_configs,
    map_paths,
    pod_files,
    policy_check,
    program_config,
    serving,
    write_config,
)
from tools.harness import ProgramRun

STACKS = ("hydra", "cosmos")
RELEASES = {"0.29.2": "headscale", "0.28.0": PREVIOUS}
pytestmark = pytest.mark.real_tool("headscale")
needs_previous = pytest.mark.real_tool("headscale", PREVIOUS)


def _output(done: object) -> str:
    return f"{getattr(done, 'stdout', '')}{getattr(done, 'stderr', '')}"


def _mapped(run: ProgramRun, name: str, text: str, root: Path) -> tuple[Path, dict[str, Path]]:
    """One rendered config with its paths mapped under ``root``, written; and where its pod paths went."""
    mapped, where = map_paths(yaml.safe_load(text), root / "pod", pod_files(run.kubernetes_objects()))
    return write_config(mapped, root / f"{name}.yaml"), where


# --- the rendered config and policy ------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_config_passes_configtest(run_stack, stack: str, tmp_path: Path) -> None:
    run = run_stack(stack)
    configs = headscale_configs(run.kubernetes_objects())
    assert configs, f"{stack}: the plan renders no Headscale config"
    for name, text in configs.items():
        config, _ = _mapped(run, name, text, tmp_path / name)
        done = configtest(config)
        assert done.returncode == 0, f"{stack} {name}: {_output(done)}"


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_policy_passes_policy_check_and_a_broken_one_fails(run_stack, stack: str, tmp_path: Path) -> None:
    """Offline, against the database of the mapped config (0.29's ``--bypass-grpc-...``), as a CI step would."""
    run = run_stack(stack)
    ((name, text),) = headscale_configs(run.kubernetes_objects()).items()
    config, where = _mapped(run, name, text, tmp_path)
    done = policy_check(where[yaml.safe_load(text)["policy"]["path"]], config_path=config)
    assert done.returncode == 0, f"{stack}: {_output(done)}"
    broken = tmp_path / "broken.json"
    broken.write_text(BROKEN_POLICY)
    refused = policy_check(broken, config_path=config)
    assert refused.returncode != 0, _output(refused)
    assert 'group not defined in policy: "group:nobody"' in _output(refused)


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_config_serves_its_policy_file(run_stack, stack: str, tmp_path: Path) -> None:
    """The stack's own config (file mode) starts, enforces the rendered policy, and the live check agrees."""
    objects = run_stack(stack).kubernetes_objects()
    ((_, text),) = headscale_configs(objects).items()
    files = pod_files(objects)
    policy_text = files[yaml.safe_load(text)["policy"]["path"]]
    with serving(text, tmp_path, files=files) as server:
        print(f"{stack}: real Headscale answered /health {server.start_seconds:.2f} s after its start")
        client = client_for(server.url, server.create_api_key(), "0.29")
        assert client.get_policy().text == policy_text
        (tmp_path / "policy.json").write_text(policy_text)
        done = policy_check(tmp_path / "policy.json", config_path=server.config_path, live=True)
        assert done.returncode == 0, _output(done)
        (tmp_path / "broken.json").write_text(BROKEN_POLICY)
        refused = policy_check(tmp_path / "broken.json", config_path=server.config_path, live=True)
        assert refused.returncode != 0, _output(refused)
        assert "group:nobody" in _output(refused)


@needs_previous
def test_config_rendered_for_the_previous_release_passes_its_configtest(tmp_path: Path) -> None:
    """The rollback target: the config the program renders for 0.28.0 is one 0.28.0 accepts."""
    files = {HeadscalePaths().policy: OTHER_POLICY}
    mapped, _ = map_paths(yaml.safe_load(program_config("0.28.0", policy_mode="file")), tmp_path / "pod", files)
    done = configtest(write_config(mapped, tmp_path / "config.yaml"), binary(PREVIOUS))
    assert done.returncode == 0, _output(done)


# --- the providers, real and fake --------------------------------------------------------------------------------


def _fake(version: str, policy_mode: str = "database") -> FakeHeadscale:
    """A fresh fake whose admin key (id 1) expires in an hour, as the real one's (``apikeys create -e 1h``)."""
    fake = FakeHeadscale(version=version, policy_mode=policy_mode)
    fake.admin_key = fake.add_api_key(expiration=datetime.now(UTC) + timedelta(hours=1))
    return fake.start()


@pytest.fixture(scope="module")
def real_script(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Transcript]:
    """The script's transcript on a fresh real server (database policy mode, the ``apply`` rendering) of a release;
    run once per release for the module."""
    done: dict[str, Transcript] = {}

    def script(version: str) -> Transcript:
        if version not in done:
            root = tmp_path_factory.mktemp(f"real-{version}")
            with serving(program_config(version), root, exe=binary(RELEASES[version])) as server:
                key = server.create_api_key()
                done[version] = provider_lifecycle(Transcript(server.url, key), client_for(server.url, key, version))
        return done[version]

    return script


def _fake_script(version: str) -> tuple[Transcript, list[str]]:
    fake = _fake(version)
    try:
        transcript = provider_lifecycle(
            Transcript(fake.url, fake.admin_key), client_for(fake.url, fake.admin_key, version)
        )
    finally:
        fake.stop()
    return transcript, fake.contract_violations


@pytest.mark.parametrize("version", [pytest.param("0.29.2"), pytest.param("0.28.0", marks=needs_previous)])
def test_providers_answer_the_fake_as_the_real_server(real_script, version: str) -> None:
    """Users, the policy, pre-auth keys, a node's settings, an API key: every provider call, and the raw listings."""
    fake, violations = _fake_script(version)
    found = disagreements(real_script(version), fake)
    assert not found, f"the fake {version} disagrees with the real one:\n" + "\n".join(found)
    assert violations == []


#: What the provider sees differ from 0.28.0 to 0.29.2, step by step (the script's step names): the wording of
#: errors, the policy check (0.29 only), and that 0.29's registration drops the routes a debug node announced.
RELEASE_DIFFERENCES = {
    "user.client.create.duplicate",  # 0.28 "failed to create user: ...", 0.29 "creating user: ..."
    "policy.update.broken",  # 0.28 SetPolicy 500; 0.29 CheckPolicy 400 first (the provider checks before setting)
    "policy.client.check.broken",  # 0.28 has no /api/v1/policy/check: the client refuses without sending
    *(f"policy.client.set.{name}" for name in ("broken", "undefined-group", "undefined-host", "unknown-field")),
    *(f"policy.client.set.{name}" for name in ("unknown-action", "bad-port")),
    "policy.client.set.undefined-tag",  # 0.29's "tag not found" makes the client raise NotFoundError
    "node.register",  # availableRoutes: 0.28 keeps the debug node's, 0.29 has none
    "wire.nodes",
}


@needs_previous
def test_what_differs_between_the_releases(real_script) -> None:
    older, newer = real_script("0.28.0"), real_script("0.29.2")
    found = disagreements(older, newer, ("0.28.0", "0.29.2"))
    print("\n".join(found))
    assert differing_steps(older, newer) == RELEASE_DIFFERENCES


def _policy_file_script(t: Transcript, client: HeadscaleClient, rendered: str) -> Transcript:
    policies = PolicyProvider().use(client)
    same = {"policy": rendered, "mode": "apply", "overwriteExisting": False, "resetOnDestroy": True}
    t.snapshot("wire.policy", "/api/v1/policy")
    t.call("policy.read", policies.read, "policy", same)
    t.call("policy.create.same", policies.create, same)
    t.call("policy.create.other", policies.create, {**same, "policy": OTHER_POLICY})
    t.call("policy.create.overwrite", policies.create, {**same, "policy": OTHER_POLICY, "overwriteExisting": True})
    t.call("policy.delete.reset", policies.delete, "policy", same)
    t.call("policy.client.check.broken", client.check_policy, BROKEN_POLICY)
    return t


def test_file_mode_policy_answers_alike(run_stack, tmp_path: Path) -> None:
    """The stacks' own mode: the live policy is the file; the provider writes nothing and is refused if it tries."""
    objects = run_stack("hydra").kubernetes_objects()
    ((_, text),) = headscale_configs(objects).items()
    files = pod_files(objects)
    rendered = files[yaml.safe_load(text)["policy"]["path"]]
    with serving(text, tmp_path, files=files) as server:
        key = server.create_api_key()
        real = _policy_file_script(Transcript(server.url, key), client_for(server.url, key, "0.29"), rendered)
    fake = _fake("0.29.2", policy_mode="file")
    fake.policy_text = rendered
    try:
        faked = _policy_file_script(
            Transcript(fake.url, fake.admin_key), client_for(fake.url, fake.admin_key, "0.29"), rendered
        )
    finally:
        fake.stop()
    assert real.steps["policy.create.overwrite"]["message"].endswith(
        "update is disabled for modes other than 'database'"
    )
    found = disagreements(real, faked)
    assert not found, "the fake (file mode) disagrees with the real one:\n" + "\n".join(found)


# --- a server that is gone, or frozen ------------------------------------------------------------------------------


def _after_stop(t: Transcript, users: UserProvider, created: object) -> Transcript:
    """What the provider does once the server stopped: writes fail naming the URL, diff and read report no change."""
    uid, outs = created.id, created.outs  # type: ignore[attr-defined]
    t.call("dead.create", users.create, {**USER, "name": "bob"})
    t.call("dead.diff", users.diff, uid, outs, {**USER, "email": "b@example.com"})
    t.call("dead.read", users.read, uid, outs)
    t.call("dead.delete", users.delete, uid, outs)
    return t


#: The wait a write gives a server that does not serve, shortened from the provider's 60 s.
PATIENCE = 2.0


def test_a_stopped_server_fails_writes_after_one_wait_and_keeps_its_data(tmp_path: Path, capsys) -> None:
    """The provider's own client (default timeouts and retries, a shorter wait) against a server that stopped: every
    call ends in seconds but one, the write that probes the server again (the delete, after the create's failure
    was remembered), which waits for it once; writes fail with the URL and "connection refused"; the fake stopped
    answers the same; a restart on the same data serves the user again, and the next write (which asks the server
    again) adopts it."""
    server = RealHeadscale(program_config(), tmp_path).start()
    try:
        key = server.create_api_key()
        users = UserProvider().use(HeadscaleClient(server.url, key, version="0.29", write_patience=PATIENCE))
        created = users.create(USER)
        server.stop()
        began = time.monotonic()
        real = _after_stop(Transcript(server.url, key), users, created)
        seconds = time.monotonic() - began
        assert f"User 1: diff reports no change because Headscale at {server.url} could not answer" in (
            capsys.readouterr().err
        )
        server.start()
        assert users.create(USER).id == created.id, "the restarted server lost its data"
    finally:
        server.close()
    fake = _fake("0.29.2")
    fake_client = HeadscaleClient(fake.url, fake.admin_key, version="0.29", write_patience=PATIENCE)
    fake_users = UserProvider().use(fake_client)
    fake_created = fake_users.create(USER)
    fake.stop()
    faked = _after_stop(Transcript(fake.url, fake.admin_key), fake_users, fake_created)
    assert real.steps["dead.create"]["message"].endswith("<url> is unreachable: connection refused")
    waited = f"(still, after waiting up to {PATIENCE:g} s for it to serve)"
    assert real.steps["dead.delete"]["message"].endswith(f"<url> is unreachable: connection refused {waited}")
    assert real.steps["dead.diff"] == {"changes": False, "replaces": [], "deleteBeforeReplace": None}
    bound = 6 + PATIENCE
    assert seconds < bound, f"{seconds:.1f} s: a stopped server costs one wait, the retries' backoff and a probe"
    assert disagreements(real, faked) == []


def test_a_write_waits_for_a_server_that_starts_serving(tmp_path: Path) -> None:
    """A run's first write, while the server is stopped and started again on the same data (a rollout the same `up`
    made): its version probe waits, with the provider's default wait, and the write lands once the server answers."""
    server = RealHeadscale(program_config(), tmp_path).start()
    try:
        key = server.create_api_key()
        UserProvider().use(HeadscaleClient(server.url, key, version="0.29")).create(USER)
        server.stop()
        client = HeadscaleClient(server.url, key, version="0.29")  # a new run's: nothing probed yet
        restart = threading.Timer(3.0, server.start)
        restart.start()
        try:
            bob = UserProvider().use(client).create({**USER, "name": "bob"})
        finally:
            restart.join()
        assert [user.name for user in client.list_users()] == [USER["name"], "bob"]
        assert bob.id == client.find_user("bob").id  # type: ignore[union-attr]
        assert client.calls.by_call["Version"] >= 3, client.calls.by_call
    finally:
        server.close()


def test_a_frozen_server_costs_the_read_timeout_per_attempt(tmp_path: Path) -> None:
    """SIGSTOP after the version probe: the kernel still accepts connections and nobody answers. A read is bounded by
    (1 + retries) x the read timeout plus the backoff, reports no change, and is not remembered: the next one costs
    as much again (with the provider's defaults, 4 x 10 s + 3.5 s = 43.5 s per call; measured)."""
    with serving(program_config(), tmp_path) as server:
        client = HeadscaleClient(server.url, server.create_api_key(), version="0.29", timeout=0.5, backoff=0.1)
        users = UserProvider().use(client)
        created = users.create(USER)
        server.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            costs = []
            for _ in range(2):
                began = time.monotonic()
                assert users.diff(created.id, created.outs, {**USER, "email": "b@example.com"}).changes is False
                costs.append(time.monotonic() - began)
            with pytest.raises(TransientError, match=r"no answer within 0.5 s \(ReadTimeout\)"):
                users.create({**USER, "name": "bob"})
        finally:
            server.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    bound = 4 * 0.5 + 0.1 + 0.2 + 0.4
    assert all(bound - 0.1 < cost < bound + 1.0 for cost in costs), costs


# --- releases ------------------------------------------------------------------------------------------------------


def test_version_endpoint_answers_as_the_fake_does(tmp_path: Path) -> None:
    """The provider's version probe reads ``GET /version``; the real build names its release there."""
    with serving(program_config(), tmp_path) as server:
        real = requests.get(f"{server.url}/version", timeout=5).json()
    fake = _fake("0.29.2")
    try:
        faked = requests.get(f"{fake.url}/version", timeout=5).json()
    finally:
        fake.stop()
    assert real["version"] == faked["version"] == "v0.29.2"
    assert set(real) == set(faked)
    assert set(real["go"]) == set(faked["go"])


@needs_previous
def test_a_stack_pinned_to_029_against_a_028_server(tmp_path: Path, capsys) -> None:
    """Half-way through an upgrade: writes are refused naming both releases, diffs report no change; without the
    version check the policy write would hit 0.28's missing check endpoint (404)."""
    with serving(program_config("0.28.0"), tmp_path, exe=binary(PREVIOUS)) as server:
        key = server.create_api_key()
        users = UserProvider().use(HeadscaleClient(server.url, key, version="0.29"))
        with pytest.raises(VersionMismatchError, match=r"runs v0.28.0 \(minor 0.28\) but the stack pins 0.29"):
            users.create(USER)
        assert users.diff("1", USER, {**USER, "email": "b@example.com"}).changes is False
        assert "runs v0.28.0" in capsys.readouterr().err
        unchecked = HeadscaleClient(server.url, key, version="0.29", verify_version=False)
        props = {"policy": POLICY, "mode": "apply", "overwriteExisting": False, "resetOnDestroy": False}
        with pytest.raises(NotFoundError, match=r"CheckPolicy failed \(HTTP 404\)"):
            PolicyProvider().use(unchecked).create(props)
        assert HeadscaleClient(server.url, key).version == "0.28"
