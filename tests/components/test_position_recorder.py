"""The position recorder (components/scripts/position-recorder.sh), run for real: under each POSIX shell, with the
real curl, against a fake Kubernetes API server that speaks real TLS (a CA and a server certificate made with the
openssl CLI; curl verifies it through CA_FILE) and is as strict as the real one about what it accepts.

curl runs through a wrapper (CURL_BIN) that appends its argv to a file before exec'ing /usr/bin/curl: every run checks
that the bearer token never reached a process's argv, nor the script's output.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.models.kube_api.fake_kube_api import NAME, NAMESPACE, Certificates, FakeKubeApi, make_certificates
from tests.support.litestream_lab import ROOT, stop_process
from tests.support.litestream_lab import wait_until as _wait_until
from tests.support.script_checks import SHELLS_ONLY, SYNTAX_CHECKERS, assert_passes, exit_codes, shell_for

SCRIPT = ROOT / "components" / "scripts" / "position-recorder.sh"
EXIT = {"stopped": 0, "usage": 2, "temp": 3, "not_recording": 4}
CURL = Path(shutil.which("curl") or "/usr/bin/curl")
INTERVAL = "0.1"
WAIT = 10.0  # the longest poll for something that happens within a few intervals

needs_openssl = pytest.mark.real_tool("openssl", "curl")


def wait_until(predicate: Callable[[], bool], *, timeout: float) -> bool:
    """tests.support.litestream_lab.wait_until, polling faster: the recorder's rounds are 0.1 s."""
    return _wait_until(predicate, timeout=timeout, interval=0.02)


def position(txid: int, epoch: int = 1_700_000_000) -> str:
    return f"{txid:016x} {epoch}"


@needs_openssl
def test_the_fake_api_is_as_strict_as_the_real_one(certificates: Certificates, tmp_path: Path) -> None:
    """What the recorder's tests rely on: the fake refuses what the API server would."""
    token_file = tmp_path / "token"
    token_file.write_text("the-token")
    api = FakeKubeApi(certificates, token_file)
    api.up()
    try:

        def status(*args: str, token: str | None = "the-token", path: str = f"{NAMESPACE}/configmaps/{NAME}") -> int:
            auth = ["-H", f"Authorization: Bearer {token}"] if token is not None else []
            result = subprocess.run(
                [str(CURL), "-sS", "--cacert", str(certificates.ca), "-o", "/dev/null", "-w", "%{http_code}",
                 *auth, *args, f"{api.url}/api/v1/namespaces/{path}"],
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            return int(result.stdout)

        merge = ["-X", "PATCH", "-H", "Content-Type: application/merge-patch+json"]
        assert status(*merge, "--data-binary", '{"data":{"position":"x"}}') == 404  # not created yet
        api.create(data={"a": "1", "b": "2"})
        assert status(*merge, "--data-binary", "{}", token=None) == 401
        assert status(*merge, "--data-binary", "{}", token="wrong") == 401
        assert status(*merge, "--data-binary", "{}", path=f"{NAMESPACE}/configmaps/other") == 403
        assert status(*merge, "--data-binary", "{}", path=f"kube-system/configmaps/{NAME}") == 403
        assert status("-X", "GET") == 405  # the recorder only patches
        assert status("-X", "PATCH", "-H", "Content-Type: application/json", "--data-binary", "{}") == 415
        assert status(*merge, "--data-binary", "{not json") == 400
        assert status(*merge, "--data-binary", "[1]") == 400
        assert status(*merge, "--data-binary", '{"data":{"a":1}}') == 422
        assert api.data() == {"a": "1", "b": "2"}
        assert status(*merge, "--data-binary", '{"data":{"a":null,"position":"p"}}') == 200
        assert api.data() == {"b": "2", "position": "p"}
        assert [r.status for r in api.requests] == [404, 401, 401, 403, 403, 405, 415, 400, 400, 422, 200]
        api.down()
        with pytest.raises(subprocess.CalledProcessError) as refused:
            status(*merge, "--data-binary", "{}")
        assert refused.value.returncode == 7  # connection refused
    finally:
        api.down()


# --- running the recorder -------------------------------------------------------------------------------------


@dataclass
class Recorder:
    proc: subprocess.Popen[bytes]
    log_path: Path
    argv_log: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def count(self, phrase: str) -> int:
        return self.log.count(phrase)

    def curl_runs(self) -> int:
        return len(self.argv_log.read_text().splitlines()) if self.argv_log.exists() else 0

    def terminate(self, timeout: float = 5) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


@dataclass
class Lab:
    """One test's pod: the position file, the projected token and CA, a private TMPDIR, the fake API."""

    root: Path
    shell: list[str]
    api: FakeKubeApi
    token: str
    recorders: list[Recorder] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # every token this test wrote

    @property
    def position_file(self) -> Path:
        return self.root / "signer" / "position"

    @property
    def token_file(self) -> Path:
        return self.root / "recorder" / "token"

    @property
    def tmpdir(self) -> Path:
        return self.root / "tmp"

    def write_position(self, text: str) -> None:
        """Like the signer: a temp file beside it, then a rename."""
        temp = self.position_file.with_name(f".position.{secrets.token_hex(4)}")
        temp.write_text(text)
        os.replace(temp, self.position_file)

    def rotate_token(self) -> str:
        self.token = secrets.token_urlsafe(48)
        temp = self.token_file.with_name(".token.new")
        temp.write_text(self.token)
        os.replace(temp, self.token_file)
        self.tokens.append(self.token)
        return self.token

    def env(self, **overrides: str | None) -> dict[str, str]:
        wrapper = self.root / "curl-wrapper"
        shell = shell_for(self.shell, self.root / "busybox-bin")
        env = {
            "PATH": shell.path or os.environ.get("PATH", "/usr/bin:/bin"),
            "POSITION_FILE": str(self.position_file),
            "NAMESPACE": NAMESPACE,
            "CONFIG_MAP": NAME,
            "TOKEN_FILE": str(self.token_file),
            "CA_FILE": str(self.api.certificates.ca),
            "API_URL": self.api.url,
            "INTERVAL_SECONDS": INTERVAL,
            "CURL_BIN": str(wrapper),
            "TMPDIR": str(self.tmpdir),
        }
        for name, value in overrides.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def start(self, **overrides: str | None) -> Recorder:
        shell = shell_for(self.shell, self.root / "busybox-bin")
        log = self.root / f"recorder-{len(self.recorders)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*shell.argv, str(SCRIPT)], env=self.env(**overrides), stdout=out, stderr=subprocess.STDOUT, cwd="/"
            )
        recorder = Recorder(proc, log, self.root / "curl-argv.log")
        self.recorders.append(recorder)
        return recorder


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("real tool missing: openssl")  # the tests using this fixture carry the real_tool mark
    return make_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=SHELLS_ONLY)
def lab(request: pytest.FixtureRequest, certificates: Certificates, tmp_path: Path) -> Iterator[Lab]:
    assert CURL.is_file(), f"{CURL} is needed: the recorder's image is curlimages/curl"
    for directory in ("signer", "recorder", "tmp"):
        (tmp_path / directory).mkdir()
    wrapper = tmp_path / "curl-wrapper"
    wrapper.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >>'{tmp_path / 'curl-argv.log'}'\nexec {CURL} \"$@\"\n")
    wrapper.chmod(0o755)
    token = secrets.token_urlsafe(48)
    (tmp_path / "recorder" / "token").write_text(token)
    api = FakeKubeApi(certificates, tmp_path / "recorder" / "token")
    api.up()
    lab = Lab(tmp_path, request.param, api, token, tokens=[token])
    try:
        yield lab
    finally:
        for recorder in lab.recorders:
            stop_process(recorder.proc)
        api.down()
    # Whatever the test did: no token in any curl argv, nor in the script's output.
    argv = (tmp_path / "curl-argv.log").read_text() if (tmp_path / "curl-argv.log").exists() else ""
    for recorder in lab.recorders:
        for secret in lab.tokens:
            assert secret not in argv
            assert secret not in recorder.log
            assert secret[:12] not in recorder.log


def logged(recorder: Recorder, phrase: str) -> bool:
    """Whether ``phrase`` appears in the recorder's log within WAIT seconds (the fake stores before it answers)."""
    return wait_until(lambda: phrase in recorder.log, timeout=WAIT)


def _patched_positions(api: FakeKubeApi) -> list[str]:
    return [json.loads(r.body)["data"]["position"] for r in api.patches()]


# --- recording ------------------------------------------------------------------------------------------------


@needs_openssl
def test_a_position_is_patched_once_exactly_as_the_api_expects(lab: Lab) -> None:
    lab.api.create(data={"other": "kept"})
    lab.write_position(position(0x2A) + "\n")
    recorder = lab.start()
    assert wait_until(lambda: lab.api.stored() == position(0x2A), timeout=WAIT), recorder.log
    (request,) = lab.api.patches()
    assert request.status == 200
    assert request.path == f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}"
    assert request.query == {"fieldManager": ["headscale-ha-position-recorder"]}
    assert request.headers["content-type"] == "application/merge-patch+json"
    assert request.headers["authorization"] == f"Bearer {lab.token}"
    assert request.body == json.dumps({"data": {"position": position(0x2A)}}, separators=(",", ":")).encode()
    assert lab.api.data() == {"other": "kept", "position": position(0x2A)}
    # Unchanged over many rounds: not sent again (the loop is alive: the next change is recorded at once).
    time.sleep(0.8)  # 8 rounds
    assert len(lab.api.patches()) == 1
    lab.write_position(position(0x2B) + "\n")
    assert wait_until(lambda: lab.api.stored() == position(0x2B), timeout=WAIT), recorder.log
    assert _patched_positions(lab.api) == [position(0x2A), position(0x2B)]
    assert recorder.count("recorded") == 1
    assert logged(
        recorder,
        "recorded the first position (000000000000002a 1700000000) into the configmap headscale/headscale-served "
        "(data.position).\n",
    ), recorder.log
    assert recorder.proc.poll() is None


@needs_openssl
def test_the_stored_value_follows_the_file(lab: Lab) -> None:
    lab.api.create()
    recorder = lab.start(DATA_KEY="served.position", FIELD_MANAGER="other-manager")
    assert wait_until(lambda: "does not exist yet" in recorder.log, timeout=WAIT), recorder.log
    for txid in (1, 5, 0x100, 0xFFFF_FFFF_FFFF):
        lab.write_position(position(txid, 1_700_000_000 + txid) + "\n")
        want = position(txid, 1_700_000_000 + txid)
        assert wait_until(lambda want=want: lab.api.stored("served.position") == want, timeout=WAIT), recorder.log
    assert [r.query["fieldManager"] for r in lab.api.patches()] == [["other-manager"]] * 4
    assert len(lab.api.patches(200)) == 4
    assert recorder.count("recorded") == 1  # the first record only


@needs_openssl
def test_before_the_configmap_exists_404_is_logged_once_then_it_is_recorded(lab: Lab) -> None:
    lab.write_position(position(7) + "\n")
    recorder = lab.start()
    assert wait_until(lambda: len(lab.api.patches(404)) >= 4, timeout=WAIT), recorder.log
    assert recorder.count("does not exist yet (HTTP 404") == 1, recorder.log
    assert lab.api.stored() is None
    lab.api.create()
    assert wait_until(lambda: lab.api.stored() == position(7), timeout=WAIT), recorder.log
    first = "recorded the first position (0000000000000007 1700000000) into the configmap headscale/headscale-served"
    assert logged(recorder, f"{first} (data.position) (after: http-404)."), recorder.log
    assert recorder.proc.poll() is None


@needs_openssl
def test_the_api_down_then_up(lab: Lab) -> None:
    lab.api.create()
    lab.api.down()
    lab.write_position(position(9) + "\n")
    recorder = lab.start()
    assert wait_until(lambda: recorder.curl_runs() >= 4, timeout=WAIT), recorder.log
    assert recorder.proc.poll() is None
    assert recorder.count("curl failed (exit 7") == 1, recorder.log
    assert recorder.count("warning:") == 1, recorder.log
    lab.api.up()
    assert wait_until(lambda: lab.api.stored() == position(9), timeout=WAIT), recorder.log
    assert logged(recorder, "(data.position) (after: curl-7)."), recorder.log
    assert len(lab.api.patches()) == 1


@needs_openssl
def test_a_refused_token_and_a_forbidden_configmap_are_logged_with_their_status(lab: Lab) -> None:
    lab.api.create()
    lab.api.create(name="other")
    lab.api.token_override = "not-the-file-token"
    lab.write_position(position(3) + "\n")
    recorder = lab.start()
    assert wait_until(lambda: len(lab.api.patches(401)) >= 3, timeout=WAIT), recorder.log
    assert recorder.count("(HTTP 401: Unauthorized)") == 1, recorder.log
    lab.api.token_override = None
    assert wait_until(lambda: lab.api.stored() == position(3), timeout=WAIT), recorder.log
    assert logged(recorder, "(data.position) (after: http-401)."), recorder.log
    # The Role names one ConfigMap only.
    forbidden = lab.start(CONFIG_MAP="other")
    assert wait_until(lambda: forbidden.count("HTTP 403") == 1, timeout=WAIT), forbidden.log
    assert 'configmaps "other" is forbidden: User "system:serviceaccount:headscale:recorder" cannot patch' in (
        forbidden.log
    )
    assert lab.api.data(name="other") == {}


@needs_openssl
def test_a_position_it_cannot_record_ends_the_container_but_a_404_does_not(lab: Lab) -> None:
    """Rollback protection is off while nothing is recorded: after GIVE_UP_SECONDS of failures (a 403 here) the
    recorder exits 4, which the kubelet's restarts (and the alert PositionNotRecorded) show. The ConfigMap not
    existing yet (404: before the first ready rollout) is waited for without giving up."""
    lab.api.create(name="other")
    lab.write_position(position(5) + "\n")
    forbidden = lab.start(CONFIG_MAP="other", GIVE_UP_SECONDS="2")
    assert wait_until(lambda: forbidden.proc.poll() is not None, timeout=WAIT), forbidden.log
    assert forbidden.proc.returncode == EXIT["not_recording"], forbidden.log
    assert "has not been recorded for" in forbidden.log
    assert "PositionNotRecorded" in forbidden.log
    waiting = lab.start(GIVE_UP_SECONDS="2")
    assert wait_until(lambda: len(lab.api.patches(404)) >= 4, timeout=WAIT), waiting.log
    assert waiting.proc.poll() is None, waiting.log
    lab.api.create()
    assert wait_until(lambda: lab.api.stored() == position(5), timeout=WAIT), waiting.log


@needs_openssl
def test_a_rotated_token_is_used_for_the_next_record(lab: Lab) -> None:
    lab.api.create()
    lab.write_position(position(1) + "\n")
    recorder = lab.start()
    assert wait_until(lambda: lab.api.stored() == position(1), timeout=WAIT), recorder.log
    old = lab.token
    new = lab.rotate_token()  # the fake accepts the file's current content only
    lab.write_position(position(2) + "\n")
    assert wait_until(lambda: lab.api.stored() == position(2), timeout=WAIT), recorder.log
    assert [r.headers["authorization"] for r in lab.api.patches()] == [f"Bearer {old}", f"Bearer {new}"]
    assert "warning" not in recorder.log


@needs_openssl
def test_sigterm_records_the_last_position_then_exits_0(lab: Lab) -> None:
    lab.api.create()
    lab.write_position(position(0x10) + "\n")
    # A long interval: the loop reads the file once; only the last attempt can see the next position.
    recorder = lab.start(INTERVAL_SECONDS="30")
    assert wait_until(lambda: lab.api.stored() == position(0x10), timeout=WAIT), recorder.log
    lab.write_position(position(0x11) + "\n")
    started = time.monotonic()
    assert recorder.terminate(timeout=10) == EXIT["stopped"], recorder.log
    assert time.monotonic() - started < 5  # the sleep was interrupted
    assert lab.api.stored() == position(0x11)
    assert _patched_positions(lab.api) == [position(0x10), position(0x11)]
    assert "stopped; the configmap headscale/headscale-served (data.position) holds 0000000000000011" in recorder.log
    assert list(lab.tmpdir.iterdir()) == []  # the private directory (and its header file) is gone


@needs_openssl
def test_sigterm_before_the_configmap_exists_still_exits_0(lab: Lab) -> None:
    lab.write_position(position(0x20) + "\n")
    recorder = lab.start(INTERVAL_SECONDS="30")
    assert wait_until(lambda: len(lab.api.patches(404)) == 1, timeout=WAIT), recorder.log
    assert recorder.terminate(timeout=10) == EXIT["stopped"], recorder.log
    assert len(lab.api.patches(404)) == 2  # the last attempt
    assert "the last position 0000000000000020 1700000000 could not be recorded (http-404)" in recorder.log
    assert list(lab.tmpdir.iterdir()) == []


MALFORMED = {
    "empty": "",
    "uppercase hex": "000000000000ABCD 1700000000\n",
    "15 digits": "000000000000abc 1700000000\n",
    "17 digits": "0000000000000abcd 1700000000\n",
    "an extra line": position(0x30) + "\n" + position(0x31) + "\n",
    "a blank line after": position(0x30) + "\n\n",
    "no newline": position(0x30),
    "no epoch": "000000000000abcd \n",
    "a tab": "000000000000abcd\t1700000000\n",
    "two spaces": "000000000000abcd  1700000000\n",
    "a trailing space": "000000000000abcd 1700000000 \n",
    "a signed epoch": "000000000000abcd -1700000000\n",
    "CRLF": "000000000000abcd 1700000000\r\n",
    "a secret": "privkey:" + "f" * 64 + "\n",
}


@needs_openssl
def test_a_malformed_position_is_never_sent(lab: Lab) -> None:
    lab.api.create()
    recorder = lab.start(INTERVAL_SECONDS="0.05")
    assert wait_until(
        lambda: "does not exist yet (the signer writes it after its first signature); waiting." in recorder.log,
        timeout=WAIT,
    ), recorder.log
    valid = 0x1000
    for what, content in MALFORMED.items():
        before = recorder.count("not recorded")
        lab.write_position(content)
        assert wait_until(lambda before=before: recorder.count("not recorded") > before, timeout=WAIT), (
            what,
            recorder.log,
        )
        # A valid position in between: the loop ran past the bad content, and the next bad one is a new state.
        valid += 1
        lab.write_position(position(valid) + "\n")
        assert wait_until(lambda valid=valid: lab.api.stored() == position(valid), timeout=WAIT), recorder.log
    assert _patched_positions(lab.api) == [position(v) for v in range(0x1001, valid + 1)]
    assert "ABCD" not in recorder.log
    assert "privkey" not in recorder.log
    assert "f" * 20 not in recorder.log
    # Logged once per bad state, not every round.
    lab.write_position(MALFORMED["uppercase hex"])
    before = recorder.count("not recorded")
    assert wait_until(lambda: recorder.count("not recorded") > before, timeout=WAIT), recorder.log
    time.sleep(0.5)  # 10 rounds
    assert recorder.count("not recorded") == before + 1
    assert recorder.count("holds nothing: not recorded") == 1
    assert recorder.count("holds more than one line") == 2
    assert recorder.count("holds a line without its newline") == 1
    assert f"the last record stays: {position(valid)}" in recorder.log


@needs_openssl
def test_the_token_is_in_no_argv_and_no_log(lab: Lab) -> None:
    lab.api.create()
    lab.write_position(position(0x40) + "\n")
    recorder = lab.start()
    assert wait_until(lambda: lab.api.stored() == position(0x40), timeout=WAIT), recorder.log
    lab.rotate_token()
    lab.write_position(position(0x41) + "\n")
    assert wait_until(lambda: lab.api.stored() == position(0x41), timeout=WAIT), recorder.log
    argv = recorder.argv_log.read_text()
    assert argv.count("-H @") == 2
    assert "--cacert" in argv
    assert "--max-time 10" in argv
    assert "Bearer" not in argv
    assert lab.token not in argv
    assert recorder.terminate() == EXIT["stopped"]
    assert lab.token not in recorder.log
    assert "Bearer" not in recorder.log
    # (the fixture checks every token of the test against every argv and log, in every test)


@needs_openssl
def test_the_default_api_url_comes_from_the_service_environment(lab: Lab) -> None:
    lab.api.create()
    lab.write_position(position(0x50) + "\n")
    recorder = lab.start(API_URL=None, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(lab.api.port))
    assert wait_until(lambda: lab.api.stored() == position(0x50), timeout=WAIT), recorder.log
    assert f"at https://127.0.0.1:{lab.api.port} (every 0.1s" in recorder.log
    ipv6 = lab.start(API_URL=None, KUBERNETES_SERVICE_HOST="::1", KUBERNETES_SERVICE_PORT="1")
    assert wait_until(lambda: "curl failed (exit 7" in ipv6.log, timeout=WAIT), ipv6.log
    assert "at https://[::1]:1 (every" in ipv6.log
    assert "[::1]:1/api/v1/namespaces/headscale/configmaps/headscale-served?fieldManager=" in (
        recorder.argv_log.read_text()
    )


@needs_openssl
def test_a_missing_token_or_ca_file_is_waited_for(lab: Lab) -> None:
    lab.api.create()
    token = lab.token_file.read_text()
    lab.token_file.unlink()
    lab.write_position(position(0x60) + "\n")
    ca = lab.root / "recorder" / "ca.crt"
    recorder = lab.start(CA_FILE=str(ca))
    assert wait_until(lambda: "TOKEN_FILE=" in recorder.log, timeout=WAIT), recorder.log
    lab.token_file.write_text(token)
    assert wait_until(lambda: "CA_FILE=" in recorder.log, timeout=WAIT), recorder.log
    time.sleep(0.4)  # 4 rounds
    assert recorder.count("warning:") == 2, recorder.log
    assert lab.api.requests == []
    shutil.copy(lab.api.certificates.ca, ca)
    assert wait_until(lambda: lab.api.stored() == position(0x60), timeout=WAIT), recorder.log
    assert logged(recorder, "(data.position) (after: ca-missing)."), recorder.log


@needs_openssl
def test_a_certificate_of_another_ca_is_refused(lab: Lab, tmp_path: Path) -> None:
    lab.api.create()
    other = make_certificates(tmp_path / "other-pki")
    lab.write_position(position(0x70) + "\n")
    recorder = lab.start(CA_FILE=str(other.ca))
    assert wait_until(lambda: "curl failed (exit 60" in recorder.log, timeout=WAIT), recorder.log
    assert lab.api.requests == []


# --- bad invocations ------------------------------------------------------------------------------------------


BAD = [
    pytest.param({"API_URL": "http://127.0.0.1:6443"}, "API_URL", "http://127.0.0.1:6443", id="http-api-url"),
    pytest.param({"API_URL": "https://h/x?y=1"}, "API_URL", "https://h/x?y=1", id="api-url-query"),
    pytest.param({"API_URL": "https://"}, "API_URL", "https://", id="api-url-no-host"),
    pytest.param({"POSITION_FILE": "signer/position"}, "POSITION_FILE", "signer/position", id="relative-position"),
    pytest.param({"POSITION_FILE": None}, "POSITION_FILE", "''", id="no-position-file"),
    pytest.param({"TOKEN_FILE": "token"}, "TOKEN_FILE", "token", id="relative-token"),
    pytest.param({"CONFIG_MAP": "Headscale_Served"}, "CONFIG_MAP", "Headscale_Served", id="bad-config-map"),
    pytest.param({"CONFIG_MAP": "served-"}, "CONFIG_MAP", "served-", id="config-map-dash-end"),
    pytest.param({"NAMESPACE": "head.scale"}, "NAMESPACE", "head.scale", id="namespace-with-dot"),
    pytest.param({"NAMESPACE": None}, "NAMESPACE", "''", id="no-namespace"),
    pytest.param({"DATA_KEY": "a/b"}, "DATA_KEY", "a/b", id="bad-data-key"),
    pytest.param({"FIELD_MANAGER": "a b"}, "FIELD_MANAGER", "a b", id="bad-field-manager"),
    pytest.param({"INTERVAL_SECONDS": "0"}, "INTERVAL_SECONDS", "'0'", id="interval-zero"),
    pytest.param({"INTERVAL_SECONDS": "0.00"}, "INTERVAL_SECONDS", "0.00", id="interval-zero-fraction"),
    pytest.param({"INTERVAL_SECONDS": "5s"}, "INTERVAL_SECONDS", "5s", id="interval-unit"),
    pytest.param({"INTERVAL_SECONDS": ".5"}, "INTERVAL_SECONDS", ".5", id="interval-no-whole"),
    pytest.param({"INTERVAL_SECONDS": "-1"}, "INTERVAL_SECONDS", "-1", id="interval-negative"),
    pytest.param({"API_URL": None}, "KUBERNETES_SERVICE_HOST", "API_URL is not set", id="no-api"),
    pytest.param({"CURL_BIN": "/nonexistent/curl"}, "CURL_BIN", "/nonexistent/curl", id="no-curl"),
]


def _run_briefly(argv: list[str], tmp_path: Path, overrides: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    """The script with a valid environment changed by ``overrides`` (None removes a variable), for a run that is
    refused before its loop."""
    shell = shell_for(argv, tmp_path / "busybox-bin")
    env = {
        "PATH": shell.path or os.environ.get("PATH", "/usr/bin:/bin"),
        "POSITION_FILE": str(tmp_path / "position"),
        "NAMESPACE": NAMESPACE,
        "CONFIG_MAP": NAME,
        "API_URL": "https://127.0.0.1:1",
        "CURL_BIN": str(CURL),
        "TMPDIR": str(tmp_path),
    }
    for name, new in overrides.items():
        if new is None:
            env.pop(name)
        else:
            env[name] = new
    return subprocess.run(
        [*shell.argv, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=10, check=False, cwd="/"
    )


@pytest.mark.parametrize("argv", SHELLS_ONLY)
@pytest.mark.parametrize(("overrides", "variable", "value"), BAD)
def test_a_bad_invocation_exits_2_naming_the_variable(
    argv: list[str], overrides: dict[str, str | None], variable: str, value: str, tmp_path: Path
) -> None:
    result = _run_briefly(argv, tmp_path, overrides)
    assert result.returncode == EXIT["usage"], result.stderr
    assert result.stderr.startswith(f"position-recorder: REFUSED (exit {EXIT['usage']}): "), result.stderr
    assert variable in result.stderr, result.stderr
    assert value in result.stderr, result.stderr
    assert list(tmp_path.glob("position-recorder.*")) == []  # refused before it made its directory


@pytest.mark.parametrize("argv", SHELLS_ONLY)
def test_an_unwritable_tmpdir_exits_3(argv: list[str], tmp_path: Path) -> None:
    result = _run_briefly(argv, tmp_path, {"TMPDIR": str(tmp_path / "absent")})
    assert result.returncode == EXIT["temp"], result.stderr
    assert f"'{tmp_path / 'absent'}'" in result.stderr


# --- static checks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_the_script_is_clean_posix_sh(checker: list[str]) -> None:
    assert_passes(checker, SCRIPT)


def test_the_exit_codes_are_documented() -> None:
    documented, defined = exit_codes(SCRIPT)
    assert documented == {*defined, 0} == set(EXIT.values())


def test_the_script_never_traces() -> None:
    text = SCRIPT.read_text()
    assert not re.search(r"^\s*set -[a-wyz]*x", text, flags=re.MULTILINE)
    # The token reaches curl through a header file only.
    assert '-H @"$HEADER_FILE"' in text
    assert "Bearer %s" in text
