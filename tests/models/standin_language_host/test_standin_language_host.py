"""The stand-in Python language host (tests/models/standin_language_host) under the real Pulumi CLI.

The runbooks' tests run ``pulumi`` itself, and the CLI runs a ``runtime: python`` program only through a language
host; the Go one cannot be built here, so these tests check that the stand-in does what the engine needs from it:
config in, outputs out (a secret stays secret), a program error fails the command with the program's traceback,
a dynamic provider creates and deletes, and ``destroy`` empties the stack. Then the host's pieces, without the CLI:
its command line, the exec shim's arguments and environment, and its answers for each exit code.

The dynamic provider gets its Python from the engine, not from this test: the engine passes the project's runtime
options to every provider plugin as ``PULUMI_RUNTIME_<OPTION>`` (pkg/resource/plugin/provider_plugin.go), so
``PULUMI_RUNTIME_VIRTUALENV`` is the ``virtualenv`` of Pulumi.yaml; the test keeps the venv off ``PATH`` to show it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import language_pb2, language_pb2_grpc

from tests.models.standin_language_host import host
from tools import real_tools

HOST_DIR = Path(__file__).resolve().parent
REPO = Path(__file__).resolve().parents[3]
VENV = REPO / ".venv"
PASSPHRASE = "stand-in language host passphrase"
SHIMS = ("pulumi-language-python-exec", "pulumi-resource-pulumi-python")

#: A program that reads its config, exports it, fails when asked, and keeps a dynamic resource (a marker file).
PROGRAM = textwrap.dedent(
    '''
    import sys
    from pathlib import Path

    import pulumi
    from pulumi.dynamic import CreateResult, Resource, ResourceProvider


    class MarkerProvider(ResourceProvider):
        """Writes "created" into the file on create and "deleted" on delete: the test sees the provider run."""

        def create(self, props):
            Path(props["path"]).write_text("created")
            return CreateResult(id_=props["path"], outs=props)

        def delete(self, id, props):
            Path(id).write_text("deleted")


    class Marker(Resource):
        def __init__(self, name, path):
            super().__init__(MarkerProvider(), name, {"path": path})


    config = pulumi.Config()
    greeting = config.require("greeting")
    if greeting == "fail":
        raise ValueError("the program was asked to fail")
    if greeting == "exit":
        sys.exit(3)
    marker = Marker("marker", config.require("marker"))
    pulumi.export("greeting", greeting)
    pulumi.export("token", config.require_secret("token"))
    pulumi.export("marker", marker.id)
    '''
)


@dataclass
class Cli:
    """The real ``pulumi`` on a scratch project with a file backend, the stand-in first on ``PATH``."""

    project: Path
    env: dict[str, str]
    marker: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["pulumi", *args], cwd=self.project, env=self.env, capture_output=True, text=True, timeout=300
        )

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.run(*args)
        assert done.returncode == 0, f"pulumi {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def outputs(self, *flags: str) -> dict[str, object]:
        return json.loads(self.ok("stack", "output", "--json", *flags).stdout)


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: its own home and backend, and no venv on PATH (the engine must name it)."""
    bin_dir = real_tools.bin_dir()
    missing = [shim for shim in SHIMS if not (bin_dir / shim).is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing beside pulumi in {bin_dir}: `make real-tools` puts them there")
    path = [part for part in os.environ.get("PATH", "").split(os.pathsep) if Path(part) != VENV / "bin"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PULUMI_", "VIRTUAL_ENV"))}
    (tmp_path / "home").mkdir()
    env.update(
        PATH=os.pathsep.join([str(HOST_DIR), str(bin_dir), *path]),
        PULUMI_HOME=str(tmp_path / "home"),
        PULUMI_BACKEND_URL=(tmp_path / "state").as_uri(),
        PULUMI_CONFIG_PASSPHRASE=PASSPHRASE,
        PULUMI_SKIP_UPDATE_CHECK="1",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
    )
    return env


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A stack ``dev`` of the program above, configured (greeting plain, token secret), not yet deployed."""
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "state").mkdir()
    pulumi_yaml = {"name": "standin", "runtime": {"name": "python", "options": {"virtualenv": str(VENV)}}}
    (project / "Pulumi.yaml").write_text(json.dumps(pulumi_yaml))  # JSON is YAML
    (project / "__main__.py").write_text(PROGRAM)
    cli = Cli(project, cli_env(tmp_path), tmp_path / "marker.txt")
    cli.ok("stack", "init", "dev")
    cli.ok("config", "set", "greeting", "hello")
    cli.ok("config", "set", "marker", str(cli.marker))
    cli.ok("config", "set", "--secret", "token", "s3cr3t")
    return cli


@pytest.mark.real_tool("pulumi")
def test_up_exports_the_config_and_keeps_the_secret_secret(cli: Cli) -> None:
    preview = cli.ok("preview")
    assert "+ 2 to create" in preview.stdout
    assert not cli.marker.exists()  # a preview runs the program, not the provider's create
    cli.ok("up", "--yes")
    assert cli.outputs() == {"greeting": "hello", "token": "[secret]", "marker": str(cli.marker)}
    assert cli.outputs("--show-secrets")["token"] == "s3cr3t"
    again = cli.ok("up", "--yes")
    assert "2 unchanged" in again.stdout


@pytest.mark.real_tool("pulumi")
def test_a_dynamic_resource_is_created_and_deleted(cli: Cli) -> None:
    cli.ok("up", "--yes")
    assert cli.marker.read_text() == "created"
    cli.ok("destroy", "--yes")
    assert cli.marker.read_text() == "deleted"
    assert cli.outputs() == {}


@pytest.mark.real_tool("pulumi")
def test_a_program_error_fails_the_command_with_its_traceback(cli: Cli) -> None:
    cli.ok("config", "set", "greeting", "fail")
    for command in (("preview",), ("up", "--yes")):
        done = cli.run(*command)
        output = done.stdout + done.stderr
        assert done.returncode != 0
        assert "Program failed with an unhandled exception" in output
        assert "ValueError: the program was asked to fail" in output
        assert "non-zero exit code" not in output  # exit code 32: the shim showed the error, the host bails
    cli.ok("config", "set", "greeting", "exit")
    done = cli.run("up", "--yes")
    assert done.returncode != 0
    assert "program exited with non-zero exit code: 3" in done.stdout + done.stderr


# --- the host without the CLI ----------------------------------------------------------------------------------


def test_the_command_line_is_go_flag_syntax_with_the_engine_last() -> None:
    parsed = host.parse_argv(["-tracing", "http://zipkin", "-root=/x", "-binary", "b", "127.0.0.1:5000"])
    assert parsed == host.Arguments(engine="127.0.0.1:5000", tracing="http://zipkin")
    assert host.parse_argv(["--use-executor=/bin/exec", "-version"]).executor == "/bin/exec"
    assert host.parse_argv(["-use-executor", "/bin/true"]) == host.Arguments(executor="/bin/true")
    assert host.parse_argv(["-root", "/x", "-v", "127.0.0.1:1"]).engine == "127.0.0.1:1"
    assert host.parse_argv(["-version"]).version


def test_the_exec_shim_gets_the_go_hosts_arguments() -> None:
    info = language_pb2.ProgramInfo(root_directory="/p", program_directory="/p", entry_point=".")
    request = language_pb2.RunRequest(
        project="proj", stack="dev", pwd="/p", monitor_address="127.0.0.1:1", parallel=8, info=info, args=["a"]
    )
    assert host.construct_arguments(request, "127.0.0.1:2", "") == [
        *("--monitor", "127.0.0.1:1", "--engine", "127.0.0.1:2", "--project", "proj", "--root_directory", "/p"),
        *("--stack", "dev", "--pwd", "/p", "--dry_run", "false", "--parallel", "8", ".", "a"),
    ]


def test_the_config_goes_in_the_environment_as_go_writes_it() -> None:
    request = language_pb2.RunRequest(config={"p:b": "<2>", "p:a": "1"}, configSecretKeys=["p:a"])
    assert host.config_environment(request) == {
        "PULUMI_CONFIG": '{"p:a":"1","p:b":"\\u003c2\\u003e"}',
        "PULUMI_CONFIG_SECRET_KEYS": '["p:a"]',
    }
    assert host.config_environment(language_pb2.RunRequest()) == {"PULUMI_CONFIG_SECRET_KEYS": "[]"}


@pytest.mark.parametrize(
    ("returncode", "response"),
    [
        (0, language_pb2.RunResponse()),
        (32, language_pb2.RunResponse(bail=True)),
        (3, language_pb2.RunResponse(error="program exited with non-zero exit code: 3")),
        (-signal.SIGKILL, language_pb2.RunResponse(error="program exited with non-zero exit code: -1")),
    ],
)
def test_each_exit_code_gets_the_go_hosts_answer(returncode: int, response: language_pb2.RunResponse) -> None:
    assert host.run_response(returncode) == response


def test_the_virtualenv_option_picks_and_activates_the_python(tmp_path: Path) -> None:
    opts = host.parse_options(str(tmp_path), str(tmp_path), {"virtualenv": "venv"}, is_plugin=False)
    tc = host.resolve_toolchain(opts)
    assert tc.python == str(tmp_path / "venv" / "bin" / "python")
    env = tc.environ({"PATH": "/usr/bin", "PYTHONHOME": "/x", "HOME": "/h"})
    assert env == {"PATH": f"{tmp_path}/venv/bin:/usr/bin", "VIRTUAL_ENV": f"{tmp_path}/venv", "HOME": "/h"}
    with pytest.raises(host.HostError, match="doesn't exist"):
        tc.validate()
    assert host.resolve_toolchain(host.PythonOptions("/p", "/p")).python == str(VENV / "bin" / "python")
    with pytest.raises(host.HostError, match="virtualenv option must be a string"):
        host.parse_options("/p", "/p", {"virtualenv": 1}, is_plugin=False)


def test_cancel_interrupts_the_running_program_and_refuses_the_next() -> None:
    children = host.Children()
    # A child that takes SIGINT's default action even when this run ignores SIGINT (a background job of a shell
    # passes SIG_IGN on to everything it starts, and `sleep` would then outlive the interrupt).
    default_int = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); time.sleep(30)"
    child = children.start([sys.executable, "-c", default_int])
    time.sleep(0.5)  # its handler set
    children.cancel()
    assert child.wait(timeout=10) == -signal.SIGINT
    with pytest.raises(OSError, match="context canceled"):
        children.start(["true"])


def test_the_host_prints_its_port_serves_and_stops_on_sigint() -> None:
    script = HOST_DIR / "pulumi-language-python"
    process = subprocess.Popen([script, "-use-executor", "/bin/true"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = language_pb2_grpc.LanguageRuntimeStub(channel)
            assert stub.GetPluginInfo(empty_pb2.Empty(), timeout=30).version == "3.276.0"
            assert stub.GetRequiredPackages(language_pb2.GetRequiredPackagesRequest(), timeout=30).packages == []
            info = language_pb2.ProgramInfo(entry_point=".", options=struct_pb2.Struct())
            with pytest.raises(grpc.RpcError, match="must call Handshake before Run"):
                stub.Run(language_pb2.RunRequest(info=info), timeout=30)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
