"""A stand-in for ``pulumi-language-python``, the Go language host the real CLI starts for ``runtime: python``.

Why it exists: the Go host's module (``github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3``) is not
served by the Go module proxy, so ``make real-tools`` cannot build it, and without it the real CLI cannot run a
Python program. This module serves the same gRPC service (``pulumirpc.LanguageRuntime``) with the SDK's generated
stubs and does what the Go host does as far as the engine can see (pulumi/pulumi v3.276.0,
``sdk/python/cmd/pulumi-language-python/main.go``):

- started as ``pulumi-language-python [flags] <engine address>``, it serves on a free loopback port, prints the port
  and a newline on stdout, and stops when the engine stops answering its health check or on SIGINT/SIGTERM;
- ``Run`` starts ``<python> <pulumi-language-python-exec> --monitor … <entry point> <args>`` exactly as the Go
  host's ``constructArguments`` does, with ``PULUMI_CONFIG`` and ``PULUMI_CONFIG_SECRET_KEYS`` in the environment
  and the program's stdout/stderr inherited (the engine reads them as the host's own); exit code 32 is a bail, any
  other failure is "program exited with non-zero exit code: N";
- the project's ``virtualenv`` option picks the Python (relative to the project root, as the Go pip toolchain
  resolves it) and "activates" it in the child's environment (``PATH``, ``VIRTUAL_ENV``, no ``PYTHONHOME``).

Where it differs, and why (each is also said at the method): the executor is found on ``PATH`` (next to the real
``pulumi``), not beside this file; without a ``virtualenv`` option the program runs with the project's own
``.venv`` Python rather than ``python3`` from ``PATH``; ``GetRequiredPlugins``/``GetRequiredPackages`` answer
nothing (plugins are ambient, on ``PATH``); ``InstallDependencies`` installs nothing (``make`` builds the venv);
only the pip toolchain is supported; debugging, policy packs (``RunPlugin`` of an analyzer) and code generation
are refused.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

#: The CLI release this stands in for (the Go host reports the CLI's version).
VERSION = "3.276.0"
EXECUTOR = "pulumi-language-python-exec"
#: The exit code with which the exec shim says it has already shown the user an actionable message.
BAIL_EXIT_CODE = 32
#: How long an interrupted program gets before it is killed (the Go host's ``cmd.WaitDelay``).
INTERRUPT_GRACE = 5.0
#: Seconds between health checks of the engine. The Go host waits 5 minutes; a stand-in left behind by a crashed
#: test run should not outlive it by that long, and the engine cannot tell the difference.
HEALTH_INTERVAL = 10.0
#: How often the main thread wakes to run a signal handler (the engine stops its plugins with SIGINT).
SIGNAL_POLL = 0.05
REPO = Path(__file__).resolve().parents[3]
PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
Context = grpc.ServicerContext
_GRPC_OPTIONS = [("grpc.max_receive_message_length", 400 * 1024 * 1024)]
_TOOLCHAINS = ("pip", "poetry", "uv")
_TYPECHECKERS = ("mypy", "pyright")


class HostError(Exception):
    """An error the Go host returns from an RPC (the engine sees status UNKNOWN with this message)."""


# --- options and toolchain -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PythonOptions:
    """The ``runtime.options`` of Pulumi.yaml the Go host reads (``parseOptions``)."""

    root: str
    program_dir: str
    virtualenv: str = ""
    toolchain: str = ""  # "" is the Go host's Auto
    typechecker: str = ""


def options_of(info: language_pb2.ProgramInfo) -> dict[str, Any]:
    """The runtime options of a ProgramInfo as plain Python values."""
    return json_format.MessageToDict(info.options) if info.HasField("options") else {}


def parse_options(root: str, program_dir: str, options: Mapping[str, Any], is_plugin: bool) -> PythonOptions:
    """The Go host's ``parseOptions``: the same checks, the same messages, the same plugin default (``venv``)."""
    values: dict[str, str] = {}
    for key in ("virtualenv", "typechecker", "toolchain"):
        if key in options:
            if not isinstance(options[key], str):
                raise HostError(f"{key} option must be a string")
            values[key] = options[key]
    if values.get("typechecker", "") not in ("", *_TYPECHECKERS):
        raise HostError(f"unsupported typechecker option: {values['typechecker']}")
    if values.get("toolchain", "") not in ("", *_TOOLCHAINS):
        raise HostError(f"unsupported toolchain option: {values['toolchain']}")
    if is_plugin and values.get("toolchain", "") in ("", "pip") and not values.get("virtualenv"):
        values["virtualenv"] = "venv"  # the Go host runs plugins in ./venv unless told otherwise
    return PythonOptions(root, program_dir, **values)


def activate_virtualenv(environ: Mapping[str, str], venv: str) -> dict[str, str]:
    """The Go toolchain's ``ActivateVirtualEnv``: venv/bin first on PATH, VIRTUAL_ENV set, PYTHONHOME unset.

    The dynamic providers' plugin and anything the program starts find the venv's ``python`` this way.
    """
    bin_dir = os.path.join(venv, "bin")
    env = {key: value for key, value in environ.items() if key.upper() not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}" if env.get("PATH") else bin_dir
    env["VIRTUAL_ENV"] = venv
    return env


def _search_up(start: str, name: str) -> bool:
    directory = Path(start or ".").resolve()
    return any((parent / name).exists() for parent in (directory, *directory.parents))


@dataclass(frozen=True)
class Toolchain:
    """The Go host's pip toolchain: a virtualenv (absolute, or relative to the project root) or none."""

    virtualenv_option: str
    virtualenv: str

    @property
    def python(self) -> str:
        """The venv's python; without a venv the project's (the Go host would take ``python3`` from PATH)."""
        return os.path.join(self.virtualenv, "bin", "python") if self.virtualenv else str(PROJECT_PYTHON)

    def command(self, args: Sequence[str]) -> list[str]:
        return [self.python, *args]

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: activated when there is a venv, as inherited when not (as the Go host)."""
        return activate_virtualenv(base, self.virtualenv) if self.virtualenv else dict(base)

    def validate(self) -> None:
        """The Go toolchain's ``ValidateVenv``, with its message (``NewVirtualEnvError``)."""
        if not self.virtualenv_option or os.path.isfile(self.python):
            return
        message = (
            "doesn't exist" if not os.path.exists(self.virtualenv) else "doesn't appear to be a virtual environment"
        )
        venv_python = os.path.join(self.virtualenv, "bin", "python")
        commands = (
            f"    1. python3 -m venv {self.virtualenv}\n"
            f"    2. {venv_python} -m pip install --upgrade pip setuptools wheel\n"
            f"    3. {venv_python} -m pip install -r requirements.txt\n"
        )
        raise HostError(
            f"The 'virtualenv' option in Pulumi.yaml is set to {json.dumps(self.virtualenv_option)}, but "
            f"{json.dumps(self.virtualenv)} {message}; run the following commands to create the virtual environment "
            f"and install dependencies into it:\n\n{commands}\n\n"
            "For more information see: https://www.pulumi.com/docs/intro/languages/python/#virtual-environments"
        )


def resolve_toolchain(opts: PythonOptions) -> Toolchain:
    """The Go host's ``ResolveToolchain``, pip only: poetry and uv (named, or found by their lock file) are refused."""
    name = opts.toolchain
    if not name:
        name = (
            "uv"
            if _search_up(opts.program_dir, "uv.lock")
            else "poetry"
            if _search_up(opts.program_dir, "poetry.lock")
            else "pip"
        )
    if name != "pip":
        raise HostError(f"the stand-in language host supports only the pip toolchain, not {name}")
    venv = opts.virtualenv
    if venv and not os.path.isabs(venv):
        venv = os.path.join(opts.root, venv)
    return Toolchain(opts.virtualenv, venv)


# --- Run -----------------------------------------------------------------------------------------------------


def construct_arguments(request: language_pb2.RunRequest, engine_address: str, tracing: str) -> list[str]:
    """The exec shim's command line, as the Go host's ``constructArguments`` builds it (empty values left out)."""
    pairs = (
        ("monitor", request.monitor_address),
        ("engine", engine_address),
        ("project", request.project),
        ("root_directory", request.info.root_directory),
        ("stack", request.stack),
        ("pwd", request.pwd),
        ("dry_run", "true" if request.dryRun else "false"),
        ("parallel", str(request.parallel)),
        ("tracing", tracing),
        ("organization", request.organization),
    )
    args = [part for key, value in pairs if value for part in (f"--{key}", value)]
    return [*args, request.info.entry_point, *request.args]


def go_json(value: object) -> str:
    """JSON as Go's ``json.Marshal`` writes it: sorted keys, no spaces, UTF-8, HTML characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        text = text.replace(char, escaped)
    return text.replace("\u2029", "\\u2029")


def config_environment(request: language_pb2.RunRequest) -> dict[str, str]:
    """PULUMI_CONFIG (only when there is config, as in Go) and PULUMI_CONFIG_SECRET_KEYS ("[]" when none)."""
    env = {"PULUMI_CONFIG_SECRET_KEYS": go_json(list(request.configSecretKeys))}
    if request.config:
        env["PULUMI_CONFIG"] = go_json(dict(request.config))
    return env


def run_response(returncode: int) -> language_pb2.RunResponse:
    """The Go host's answer for the program's exit status (a signal is Go's ``ExitStatus() == -1``)."""
    if returncode == 0:
        return language_pb2.RunResponse()
    if returncode == BAIL_EXIT_CODE:
        return language_pb2.RunResponse(bail=True)
    code = -1 if returncode < 0 else returncode
    return language_pb2.RunResponse(error=f"program exited with non-zero exit code: {code}")


def _not_started(error: object) -> str:
    return f"problem executing program (could not run language executor): {error}"


class Children:
    """The programs and plugins running now, so that ``Cancel`` (or the end of their RPC) can interrupt them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self.cancelled = False

    def start(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start a child unless ``Cancel`` came first (then Go's "context canceled", as an OSError)."""
        with self._lock:
            if self.cancelled:
                raise OSError("context canceled")
            child = subprocess.Popen(argv, **popen)
            self._running.add(child)
            return child

    def done(self, child: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(child)

    def cancel(self) -> None:
        """The Go host's ``Cancel``: every running program is interrupted, and no new one starts."""
        with self._lock:
            self.cancelled = True
            running = list(self._running)
        for child in running:
            interrupt(child)


def interrupt(child: subprocess.Popen[bytes], grace: float = INTERRUPT_GRACE) -> None:
    """SIGINT now, SIGKILL after ``grace`` seconds if it is still running (Go's ``cmd.Cancel`` and ``WaitDelay``)."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGINT)
    timer = threading.Timer(grace, lambda: child.poll() is None and child.kill())
    timer.daemon = True
    timer.start()


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.kill()


def typecheck(tc: Toolchain, opts: PythonOptions, env: Mapping[str, str], installed: Callable[[], list[str]]) -> None:
    """The Go host's typechecker step: ``python -m mypy|pyright <program dir>`` before the program, failing the run."""
    checker = opts.typechecker
    args = ["-m", checker]
    if checker == "mypy" and tc.virtualenv:
        args += ["--exclude", os.path.relpath(tc.virtualenv, opts.program_dir)]
    if checker not in installed():
        pip = f"{opts.virtualenv}/bin/pip install -r requirements.txt"
        raise HostError(
            f"The typechecker option is set to {checker}, but {checker} is not installed. "
            f"Please add an entry for {checker} to requirements.txt and run `{pip}`"
        )
    done = subprocess.run(
        tc.command([*args, opts.program_dir]), env=env, cwd=opts.program_dir, capture_output=True, text=True
    )
    output = done.stdout + done.stderr
    sys.stdout.write(output)
    sys.stdout.flush()
    if done.returncode != 0:
        failure = f"{checker} failed: exit status {done.returncode}"
        raise HostError(f"{failure}\n{output}" if output else failure)


# --- RunPlugin -------------------------------------------------------------------------------------------------


def plugin_command(tc: Toolchain, opts: PythonOptions, args: Sequence[str]) -> list[str]:
    """``python <plugin dir> args`` for a bare plugin (``__main__.py``), else ``python -m pulumi.run.plugin <name>``."""
    if os.path.isfile(os.path.join(opts.root, "__main__.py")):
        return tc.command([opts.program_dir, *args])
    pyproject = Path(opts.root) / "pyproject.toml"
    if not pyproject.is_file():
        raise HostError("plugin is not runnable, it provides neither __main__.py nor a buildable pyproject.toml")
    import tomllib  # only a packaged plugin needs it

    name = tomllib.loads(pyproject.read_text())["project"]["name"]
    return tc.command(["-m", "pulumi.run.plugin", name, *args])


def _pump(stream: Any, kind: str, out: queue.Queue[tuple[str, bytes]]) -> None:
    """Copy a child's pipe into the queue in chunks as they come, then an empty chunk for the end."""
    for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
        out.put((kind, chunk))
    out.put((kind, b""))


def stream_child(child: subprocess.Popen[bytes]) -> Iterator[language_pb2.RunPluginResponse]:
    """The child's stdout and stderr as RunPluginResponse messages, then its exit code when it is not 0."""
    chunks: queue.Queue[tuple[str, bytes]] = queue.Queue()
    for kind, stream in (("stdout", child.stdout), ("stderr", child.stderr)):
        threading.Thread(target=_pump, args=(stream, kind, chunks), daemon=True).start()
    open_streams = 2
    while open_streams:
        kind, chunk = chunks.get()
        if not chunk:
            open_streams -= 1
            continue
        yield language_pb2.RunPluginResponse(**{kind: chunk})
    code = child.wait()
    if code != 0:
        yield language_pb2.RunPluginResponse(exitcode=-1 if code < 0 else code)


# --- the service -----------------------------------------------------------------------------------------------


def _abort_on_host_error(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a HostError into the gRPC status the Go host's ``return nil, err`` gives (UNKNOWN, the message)."""

    def handler(self: LanguageHost, request: Any, context: Context) -> Any:
        try:
            return method(self, request, context)
        except HostError as error:
            context.abort(grpc.StatusCode.UNKNOWN, str(error))

    handler.__name__ = method.__name__
    handler.__doc__ = method.__doc__
    return handler


class LanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    """``pulumirpc.LanguageRuntime`` for Python programs, as the Go host answers it (module docstring: where not).

    The methods have the service's names (hence N802), which the generated stubs dispatch to.
    """

    def __init__(
        self, executor: str, engine_address: str = "", tracing: str = "", on_engine: Callable[[str], None] | None = None
    ) -> None:
        self.executor = executor
        self.engine_address = engine_address
        self.tracing = tracing
        self.children = Children()
        self._on_engine = on_engine

    def _program(self, info: language_pb2.ProgramInfo, is_plugin: bool = False) -> tuple[PythonOptions, Toolchain]:
        opts = parse_options(info.root_directory, info.program_directory, options_of(info), is_plugin)
        return opts, resolve_toolchain(opts)

    def Handshake(self, request: language_pb2.LanguageHandshakeRequest, context: Context) -> Any:  # noqa: N802
        """Remember the engine (for ``--engine``) and watch its health, as the Go host does."""
        self.engine_address = request.engine_address
        if self._on_engine is not None:
            self._on_engine(request.engine_address)
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request: empty_pb2.Empty, context: Context) -> Any:  # noqa: N802
        """The CLI's version, as the Go host (built with the CLI) reports it."""
        return plugin_pb2.PluginInfo(version=VERSION)

    def GetRequiredPlugins(self, request: Any, context: Context) -> Any:  # noqa: N802
        """Nothing: the plugins are ambient (on PATH), so the engine must not try to install what the venv names.

        The Go host answers UNIMPLEMENTED here and lists the venv's ``pulumi-*`` packages in GetRequiredPackages.
        """
        return language_pb2.GetRequiredPluginsResponse()

    def GetRequiredPackages(self, request: Any, context: Context) -> Any:  # noqa: N802
        """Nothing: plugins are ambient (on PATH, whatever version the SDK asks for), and none may be downloaded.

        The Go host would list every ``pulumi-*`` package of the venv (creating the venv first if missing).
        """
        return language_pb2.GetRequiredPackagesResponse()

    def InstallDependencies(self, request: Any, context: Context) -> Iterator[Any]:  # noqa: N802
        """Installs nothing (``make`` builds the venv from the pinned requirements); the Go host's two lines only."""
        yield language_pb2.InstallDependenciesResponse(stdout=b"Installing dependencies...\n\n")
        yield language_pb2.InstallDependenciesResponse(stdout=b"Finished installing dependencies\n\n")

    def RuntimeOptionsPrompts(self, request: Any, context: Context) -> Any:  # noqa: N802
        """No prompts: only ``pulumi new`` asks, and the stand-in has one toolchain (pip) to offer."""
        return language_pb2.RuntimeOptionsResponse()

    @_abort_on_host_error
    def About(self, request: language_pb2.AboutRequest, context: Context) -> Any:  # noqa: N802
        """The Python's path and version and pip's version, from the Python the program would run with."""
        opts = PythonOptions("", "", toolchain="pip")
        if request.HasField("info"):
            opts = parse_options(
                request.info.root_directory, request.info.program_directory, options_of(request.info), False
            )
        tc = resolve_toolchain(opts)
        script = (
            "import sys, platform, importlib.metadata as m\n"
            "print(sys.executable); print(platform.python_version())\n"
            "try: print(m.version('pip'))\nexcept Exception: print('0.0.0')"
        )
        done = subprocess.run(tc.command(["-c", script]), env=tc.environ(os.environ), capture_output=True, text=True)
        if done.returncode != 0:
            raise HostError(f"failed to get python executable path: exit status {done.returncode}")
        executable, version, pip = done.stdout.split()
        metadata = {
            "toolchain": (opts.toolchain or "auto").capitalize(),
            "toolchainVersion": _semver(pip),
            "typechecker": (opts.typechecker or "none").capitalize(),
        }
        return language_pb2.AboutResponse(executable=executable, version=_semver(version), metadata=metadata)

    @_abort_on_host_error
    def GetProgramDependencies(self, request: Any, context: Context) -> Any:  # noqa: N802
        """``pip list`` of the program's Python, as the Go pip toolchain's ``ListPackages``."""
        _, tc = self._program(request.info)
        dependencies = [
            language_pb2.DependencyInfo(name=name, version=version)
            for name, version in list_packages(tc, request.transitiveDependencies)
        ]
        return language_pb2.GetProgramDependenciesResponse(dependencies=dependencies)

    @_abort_on_host_error
    def Run(self, request: language_pb2.RunRequest, context: Context) -> Any:  # noqa: N802
        """Run the program through the exec shim, exactly as the Go host's ``Run`` (module docstring)."""
        if not self.engine_address:
            raise HostError("when debugging or running explicitly, must call Handshake before Run")
        opts, tc = self._program(request.info)
        if request.attach_debugger:
            return language_pb2.RunResponse(error="the stand-in language host cannot attach a debugger")
        argv = tc.command([self.executor, *construct_arguments(request, self.engine_address, self.tracing)])
        tc.validate()
        env = {**tc.environ(os.environ), **config_environment(request)}
        if opts.typechecker:
            typecheck(tc, opts, env, lambda: [name for name, _ in list_packages(tc, True)])
        try:
            child = self.children.start(argv, env=env)
        except OSError as error:
            return language_pb2.RunResponse(error=_not_started(error.strerror or error))
        context.add_callback(lambda: interrupt(child))  # the engine went away or gave up on this Run
        try:
            return run_response(child.wait())
        finally:
            self.children.done(child)

    def RunPlugin(self, request: language_pb2.RunPluginRequest, context: Context) -> Iterator[Any]:  # noqa: N802
        """A Python resource plugin (``PulumiPlugin.yaml``, ``runtime: python``), as the Go host runs one.

        Policy packs (kind ``analyzer``) need the Go host's policy proxy and are refused.
        """
        try:
            if request.kind == "analyzer":
                raise HostError("the stand-in language host cannot run policy packs")
            opts, tc = self._program(request.info, is_plugin=True)
            argv = plugin_command(tc, opts, request.args)
            env = tc.environ(os.environ)
            env.update(entry.split("=", 1) for entry in request.env if "=" in entry)
            child = self.children.start(
                argv, env=env, cwd=request.pwd or None, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except HostError as error:
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        except OSError as error:
            problem = f"problem executing plugin program (could not run language executor): {error.strerror or error}"
            context.abort(grpc.StatusCode.UNKNOWN, problem)
        context.add_callback(lambda: _kill(child))  # Go's exec.CommandContext kills on the RPC's end
        try:
            yield from stream_child(child)
        finally:
            self.children.done(child)

    def Cancel(self, request: empty_pb2.Empty, context: Context) -> Any:  # noqa: N802
        """Interrupt every running program (SIGINT, then SIGKILL after 5 s); later Runs fail at once."""
        self.children.cancel()
        return empty_pb2.Empty()


def _semver(version: str) -> str:
    """A Python or pip version as Go's semver prints it: at least three numbers (``24.0`` is ``24.0.0``)."""
    numbers = version.split(".")[:3]
    numbers += ["0"] * (3 - len(numbers))
    return ".".join(numbers)


def list_packages(tc: Toolchain, transitive: bool) -> list[tuple[str, str]]:
    """(name, version) of what ``pip list`` shows, names normalised as PEP 503 says (as the Go toolchain)."""
    args = ["-m", "pip", "list", "--format", "json", *([] if transitive else ["--not-required"])]
    done = subprocess.run(tc.command(args), env=tc.environ(os.environ), capture_output=True, text=True)
    if done.returncode != 0:
        raise HostError(f"failed to get python dependencies: calling `{' '.join(args)}`: exit status {done.returncode}")
    normal = str.maketrans({"_": "-", ".": "-"})
    return [(entry["name"].lower().translate(normal), entry["version"]) for entry in json.loads(done.stdout)]


# --- the process -----------------------------------------------------------------------------------------------


@dataclass
class Arguments:
    """The command line: the Go host's flags (``-tracing``, ``-version``, ``-use-executor``) and the engine."""

    engine: str = ""
    tracing: str = ""
    executor: str = ""
    version: bool = False


def parse_argv(argv: Sequence[str]) -> Arguments:
    """Go ``flag`` syntax (``-x v``, ``-x=v``, ``--x``) up to the first argument that is not a flag: the engine.

    Unknown flags are skipped; one takes the next argument as its value unless that is the last argument (the
    engine address always comes last).
    """
    parsed = Arguments()
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        name, equals, value = rest.pop(0).lstrip("-").partition("=")
        if name == "version":
            parsed.version = value.lower() not in ("false", "0")
        elif not equals and len(rest) > (0 if name in ("tracing", "use-executor") else 1):
            value = rest.pop(0) if name in ("tracing", "use-executor") or not rest[0].startswith("-") else ""
        if name == "tracing":
            parsed.tracing = value
        elif name == "use-executor":
            parsed.executor = value
    parsed.engine = rest[0] if rest else ""
    return parsed


class EngineWatch:
    """The Go host's ``rpcutil.Healthcheck``: ask the engine's health service now and then, stop when it is gone.

    UNIMPLEMENTED counts as alive (as in Go); any other failure stops the host.
    """

    def __init__(self, gone: threading.Event, interval: float = HEALTH_INTERVAL) -> None:
        self.gone = gone
        self.interval = interval
        self._watched: set[str] = set()
        self._lock = threading.Lock()

    def watch(self, address: str) -> None:
        with self._lock:
            if not address or address in self._watched:
                return
            self._watched.add(address)
        threading.Thread(target=self._loop, args=(address,), daemon=True, name=f"health {address}").start()

    def _loop(self, address: str) -> None:
        with grpc.insecure_channel(address) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=lambda _: b"",  # an empty HealthCheckRequest
                response_deserializer=lambda data: data,
            )
            while not self.gone.wait(self.interval):
                try:
                    check(None, timeout=60)
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNIMPLEMENTED:
                        self.gone.set()
                        return


def serve(argv: Sequence[str]) -> int:
    """Serve until the engine goes away or a signal comes; the port goes to stdout first (the engine waits for it)."""
    args = parse_argv(argv)
    if args.version:
        print(VERSION)
        return 0
    executor = args.executor or shutil.which(EXECUTOR)
    if not executor:
        print(f"error: missing executor {EXECUTOR}: not found on PATH", file=sys.stderr)
        return 255
    stop = threading.Event()
    watch = EngineWatch(stop)
    watch.watch(args.engine)
    host = LanguageHost(executor, args.engine, args.tracing, on_engine=watch.watch)
    server = grpc.server(ThreadPoolExecutor(max_workers=32), options=_GRPC_OPTIONS)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(port, flush=True)
    # A signal may land on one of gRPC's threads, and then only a main thread that wakes up runs the handler.
    while not stop.wait(SIGNAL_POLL):
        pass
    host.children.cancel()
    server.stop(grace=INTERRUPT_GRACE).wait()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
