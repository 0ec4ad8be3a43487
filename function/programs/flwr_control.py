"""What the programs in the SuperLink's pod share: the release's `flwr` CLI and the Kubernetes API.

Standard library only, Python 3.10 and later, as every supported Flower image
has them; shipped inside the programs' archive (function/builders/identity.py),
so it imports nothing else of this package.

The programs talk to the SuperLink through the release's own `flwr` CLI,
configured the way that release reads it (a Flower app's pyproject.toml up to
1.25, $FLWR_HOME/config.toml from 1.26), so the Control API is used as Flower
intends in every release. The CLI is imported once and each command runs in a
child forked from the program: a call costs what the command does, not the
second or two of importing Flower that starting `flwr` costs.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, Literal

# The name of the SuperLink connection the CLI is given.
CONNECTION = "federation"
# Where an app's pyproject.toml names its SuperLinks (up to 1.25).
FEDERATIONS = "tool.flwr.federations"
# How long a `flwr` call may take before it is killed, and how often the caller looks whether it ended.
CLI_TIMEOUT = 60.0
FORK_POLL = 0.02
# Seconds between looks at the mounted file a waiting program acts on (a stat, no CPU
# to speak of): a change the kubelet delivers is acted on within this, whatever the interval.
WATCH_EVERY = 1.0
HTTP_OK = 200
# The longest message (of Flower's, of a program's) a reason or a ConfigMap's line carries.
REASON_LENGTH = 300
# A run's Flower App Bundle at most, in bytes: function/api/run_spec.py MAX_FAB_BYTES, copied (the
# programs import nothing of function.api; tests/programs/test_bundler.py holds the two equal).
MAX_FAB_BYTES = 512 * 1024
# The ConfigMap a run's bundler Job fills (mode bundle, function/programs/bundle_program.py) and the
# runner reads: the app's bundle under BUNDLE_KEY (binaryData), or why there is none under BUNDLE_ERROR_KEY (data).
BUNDLE_KEY = "app.fab"
BUNDLE_ERROR_KEY = "error"


class Cli:
    """The release's `flwr` CLI, pointed at one SuperLink's Control API."""

    def __init__(self, work: pathlib.Path, style: str, address: str, root_certificates: str | None) -> None:
        """Write the connection where the release's CLI reads it (style: pyproject or config-toml)."""
        security = f'root-certificates = "{root_certificates}"' if root_certificates else "insecure = true"
        # The CLI's entry point once loaded (False: not importable here, so each call starts `flwr`).
        self.entry: Callable[[], Any] | Literal[False] | None = None
        self.home = work / "home"
        self.app = work / "app"
        self.home.mkdir(parents=True, exist_ok=True)
        self.app.mkdir(parents=True, exist_ok=True)
        if style == "pyproject":
            # Up to 1.25 the CLI reads connections from a Flower app's pyproject.toml,
            # which must be a valid app: these sections are the least it accepts.
            (self.app / "pyproject.toml").write_text(
                '[project]\nname = "registration"\nversion = "1.0.0"\n\n'
                '[tool.flwr.app]\npublisher = "function-flower"\n\n'
                '[tool.flwr.app.components]\nserverapp = "app:server"\nclientapp = "app:client"\n\n'
                "[tool.flwr.app.config]\n\n"
                f'[tool.flwr.federations]\ndefault = "{CONNECTION}"\n\n'
                f'[tool.flwr.federations.{CONNECTION}]\naddress = "{address}"\n{security}\n'
            )
            self.target = [".", CONNECTION]
        else:
            # Without a config file the CLI would start a local simulation SuperLink instead.
            (self.home / "config.toml").write_text(
                f'[superlink]\ndefault = "{CONNECTION}"\n\n'
                f'[superlink.{CONNECTION}]\naddress = "{address}"\n{security}\n'
            )
            self.target = [CONNECTION]
        self.style = style
        self.connection = f'address = "{address}"\n{security}\n'

    def call(self, *argv: str, app: pathlib.Path | None = None, options: tuple[str, ...] = ()) -> dict[str, Any]:
        """`flwr <argv> <target> <options> --format json`: its JSON answer, or {"success": False, "error-message": ...}.

        argv is the subcommand and its own arguments (`supernode register KEY`,
        `stop 7`); the target (an app's path where the command takes one, then
        the connection) follows them, as every release's commands take it.
        """
        env = {**os.environ, "FLWR_HOME": str(self.home), "HOME": str(self.home), "NO_COLOR": "1"}
        args = [*argv, *self.target_of(app), *options, "--format", "json"]
        if self.entry is None:
            self.entry = load_entry_point("flwr")
        if self.entry is False:
            ran = run_subprocess(["flwr", *args], self.app, env, CLI_TIMEOUT)
        else:
            ran = run_forked(self.entry, ["flwr", *args], self.app, env, CLI_TIMEOUT)
        code, stdout, stderr = ran
        if code is None:
            return {"success": False, "error-message": killed(f"flwr did not answer within {CLI_TIMEOUT:.0f} s", ran)}
        return parse(stdout, f"{stderr.strip()} (exit {code})")

    def target_of(self, app: pathlib.Path | None) -> list[str]:
        """What names the SuperLink after a command's own arguments: the app (where one is run) and the connection."""
        if app is None:
            return self.target
        return [str(app), CONNECTION]

    def connect_app(self, app: pathlib.Path) -> None:
        """Make an unpacked app run against this SuperLink, whatever federations its pyproject.toml names.

        Up to 1.25 the CLI reads the connection from the app's pyproject.toml:
        it is added as a table of its own, the app's other federations left as
        they are. From 1.26 the CLI reads $FLWR_HOME, and `flwr run` moves an
        app's legacy federations there (one of the same name would replace
        this SuperLink's connection): they are commented out first, as that
        migration itself leaves them.
        """
        pyproject = app / "pyproject.toml"
        text = pyproject.read_text() if pyproject.exists() else ""
        if self.style == "pyproject":
            pyproject.write_text(f"{text.rstrip()}\n\n[tool.flwr.federations.{CONNECTION}]\n{self.connection}")
        elif FEDERATIONS in text:
            pyproject.write_text(without_federations(text))


def one_line(text: str) -> str:
    """A message as a reason carries it: one line, at most REASON_LENGTH characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= REASON_LENGTH else flat[: REASON_LENGTH - 3] + "..."


def without_federations(text: str) -> str:
    """A pyproject.toml's text with its [tool.flwr.federations...] tables commented out, line by line."""
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        header = line.strip()
        if header.startswith("["):
            inside = header.lstrip("[").startswith(FEDERATIONS)
        out.append(f"# {line}" if inside else line)
    return "".join(out)


def load_entry_point(name: str) -> Callable[[], Any] | Literal[False]:
    """The console script `name` of this interpreter, imported once; False if this Python cannot load it.

    Importing the CLI is most of what a `flwr` call costs (one to two CPU seconds for
    Flower and its dependencies, against tens of milliseconds for the call itself).
    """
    try:
        found = importlib.metadata.entry_points(group="console_scripts", name=name)
        entry = next(iter(found)).load()
    except Exception as error:  # any failure to import means: start the command instead
        print(f"{name} runs as a command: its entry point does not load here ({error!r})", flush=True)
        return False
    return entry if callable(entry) else False


def run_forked(
    entry: Callable[[], Any], argv: list[str], cwd: pathlib.Path, env: dict[str, str], timeout: float
) -> tuple[int | None, str, str]:
    """Run a loaded console script as its command would run: (exit code, stdout, stderr), the code None past timeout.

    Past the timeout the child is killed, and the output is what it had printed by then.

    The child is forked from this process, which imported the script once, so
    a call costs what the command does, not its imports; and being a process
    of its own, it leaves nothing behind (connections, changed globals) and
    can be killed at the timeout. This process holds no thread and no gRPC
    channel (the children make their own), so the fork is safe. Its output
    goes to unnamed files in cwd (the containers' root filesystems are
    read-only and have no /tmp), which a pipe could not hold unread; line by
    line, so a command killed at the timeout leaves its last words there.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(dir=cwd) as out, tempfile.TemporaryFile(dir=cwd) as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                # The streams too, should this process have replaced them with objects of its own.
                sys.stdout = open(1, "w", buffering=1, closefd=False)
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                os.chdir(cwd)
                os.environ.clear()
                os.environ.update(env)
                sys.argv = argv
                code = _exit_code(entry)
            except BaseException:  # whatever happens, the child reports it and exits
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        exit_code = _waited(pid, timeout)
        out.seek(0)
        err.seek(0)
        return exit_code, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def _waited(pid: int, timeout: float) -> int | None:
    """The child's exit code once it ends, or None once it was killed at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(FORK_POLL)


def _exit_code(entry: Callable[[], Any]) -> int:
    """Run a console script's entry point: the exit code its command would return."""
    try:
        result = entry()
    except SystemExit as exit_:
        result = exit_.code
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    print(result, file=sys.stderr)  # sys.exit("message"), as the command would print it
    return 1


def run_subprocess(
    argv: list[str], cwd: pathlib.Path, env: dict[str, str], timeout: float
) -> tuple[int | None, str, str]:
    """The command as a process of its own: (exit code, stdout, stderr), the code None past the timeout."""
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as expired:
        return None, _text(expired.stdout), _text(expired.stderr)
    return proc.returncode, proc.stdout, proc.stderr


def _text(output: bytes | str | None) -> str:
    """What a killed process had printed (TimeoutExpired holds bytes, whatever text= asked)."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def last_words(stdout: str, stderr: str, lines: int = 3) -> str:
    """A command's last non-empty lines of output, on one line: what it was doing when it ended or was killed."""
    said = [line.strip() for line in f"{stdout}\n{stderr}".splitlines() if line.strip()]
    return " | ".join(said[-lines:])


def killed(why: str, ran: tuple[int | None, str, str]) -> str:
    """Why a command was killed at its timeout, and its last words (run_forked's or run_subprocess's answer)."""
    said = last_words(ran[1], ran[2])
    return f"{why}; its last words: {said}" if said else why


def parse(stdout: str, fallback: str) -> dict[str, Any]:
    """The JSON object the CLI printed (some releases pretty-print it over several lines)."""
    start, end = stdout.find("{"), stdout.rfind("}")
    if start != -1 and end > start:
        try:
            value = json.loads(stdout[start : end + 1])
        except ValueError:
            pass
        else:
            if isinstance(value, dict):
                return value
    return {"success": False, "error-message": f"no JSON answer: {stdout.strip()} {fallback}"}


class KubeApi:
    """The pod's own cluster's API server, as the pod's projected ServiceAccount token reaches it."""

    def __init__(self, host: str, port: str, credentials: pathlib.Path) -> None:
        """credentials: the projected volume holding `token` and the cluster's CA as `ca.crt`."""
        self.base = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.credentials = credentials
        self.context = ssl.create_default_context(cafile=str(credentials / "ca.crt"))

    @classmethod
    def from_environment(cls, credentials: pathlib.Path) -> KubeApi | None:
        """The API server the kubelet names in every pod's environment; None outside Kubernetes."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port or not (credentials / "token").exists():
            return None
        return cls(host, port, credentials)

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        """The status code and JSON answer of one request; (0, {"message": ...}) when there was no answer."""
        # Read at every call: the kubelet rotates a projected token before it expires.
        token = (self.credentials / "token").read_text().strip()
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)  # noqa: S310 - https only
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:  # noqa: S310
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as err:
            try:
                said = json.loads(err.read() or b"{}")
            except ValueError:
                said = {}
            return err.code, said if isinstance(said, dict) else {}
        except (OSError, ValueError) as err:
            return 0, {"message": f"no answer from the Kubernetes API: {err}"}

    def watch(self, path: str, seconds: int) -> Iterator[dict[str, Any]]:
        """The events of a watch (path: a list's, with its query), one at a time, until the server ends it.

        seconds: how long the server keeps it open (timeoutSeconds); a silent
        connection is dropped a minute after. An error (no answer, a refusal, a
        broken line) ends it with OSError or ValueError: the caller lists again.
        """
        token = (self.credentials / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        url = f"{self.base}{path}&watch=1&allowWatchBookmarks=true&timeoutSeconds={seconds}"
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 - https only
        with urllib.request.urlopen(request, context=self.context, timeout=seconds + 60) as answer:  # noqa: S310
            for line in answer:
                if line.strip():
                    event = json.loads(line)
                    if not isinstance(event, dict):
                        said = f"not an event: {line[:REASON_LENGTH]!r}"
                        raise ValueError(said)
                    yield event


def patch_configmap(
    api: KubeApi, namespace: str, name: str, data: dict[str, str], field: str = "data"
) -> tuple[bool, str]:
    """Merge data into a ConfigMap of the pod's namespace (which the function composed): whether it took, or why not.

    field: the ConfigMap's map it goes into, `data` (text) or `binaryData` (base64).
    """
    status, answer = api.call(
        "PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{name}", {field: data}, "application/merge-patch+json"
    )
    if status == HTTP_OK:
        return True, ""
    return False, f"{status} {answer.get('message', '')}".strip()


def version(path: pathlib.Path) -> tuple[int, int, int] | None:
    """What tells one content of a mounted file from the next (None while there is none).

    The kubelet swaps a new file in (a new inode); a file rewritten in place has a new modification time or size.
    """
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def sleep_until_changed(path: pathlib.Path, seen: tuple[int, int, int] | None, seconds: float) -> None:
    """Sleep for seconds, or until the file at path is no longer the version seen.

    The interval paces the work that costs (each turn runs the `flwr` CLI); what the
    kubelet delivers (a key to register, a run to start) is acted on within WATCH_EVERY.
    """
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(WATCH_EVERY, left))
        if version(path) != seen:
            return


def answered(cli: Cli, interval: float, *argv: str) -> dict[str, Any]:
    """A listing the SuperLink answered: asked again until it does, each new reason it does not said once.

    The registrar's and the runner's turns both start here: neither acts on a SuperLink it cannot hear.
    """
    said = ""
    while True:
        answer = cli.call(*argv)
        if answer.get("success"):
            return answer
        waiting = f"waiting for the SuperLink's Control API: {answer.get('error-message', '')}".strip()
        if waiting != said:
            print(waiting, flush=True)
            said = waiting
        time.sleep(min(interval, 5.0))
