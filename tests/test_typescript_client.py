"""The TypeScript client (clients/typescript/) built and tested as CI runs it, from pytest.

``npm ci`` (skipped when node_modules already matches package-lock.json), ``npx tsc``, then
``node --test`` on the compiled tests, which start a real ``mempp serve`` with this
interpreter and this checkout's source. Skips cleanly without ``node`` (>= 18) or ``npm``,
or when the npm registry cannot be reached; any other failure fails the test with npm's or
node's own output.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "clients" / "typescript"
STAMP = PACKAGE / "node_modules" / ".mempp-lock-sha256"
INSTALL_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 180
TEST_TIMEOUT_S = 600
# npm's words for a registry it cannot reach (no network, DNS, a proxy that refuses).
OFFLINE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNREFUSED|ECONNRESET|ENETUNREACH|EHOSTUNREACH|"
    r"network request|request to https?://\S+ failed|self.signed certificate",
    re.IGNORECASE,
)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            command,
            cwd=PACKAGE,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or b""
        out = raw if isinstance(raw, str) else raw.decode(errors="replace")
        pytest.fail(f"{' '.join(command)} took over {timeout} s:\n{out[-4000:]}")
    output = done.stdout + done.stderr
    if done.returncode != 0:
        match = OFFLINE.search(output)
        if command[1:2] == ["ci"] and match:
            pytest.skip(f"npm cannot reach the registry ({match.group(0)})")
        pytest.fail(f"{' '.join(command)} exited {done.returncode}:\n{output[-8000:]}")
    return output


def _install(npm: str) -> None:
    lock = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    if STAMP.is_file() and STAMP.read_text().strip() == lock:
        return  # node_modules was installed from this very lock file
    _run([npm, "ci", "--no-audit", "--no-fund"], INSTALL_TIMEOUT_S)
    STAMP.write_text(lock + "\n")


def test_typescript_client_against_a_real_server() -> None:
    node = _tool("node")
    npm = _tool("npm")
    npx = _tool("npx")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    major = re.match(r"v(\d+)", version.stdout.strip())
    if major is None or int(major.group(1)) < 18:
        pytest.skip(f"node >= 18 is needed (found {version.stdout.strip() or 'none'})")
    _install(npm)
    shutil.rmtree(PACKAGE / "dist", ignore_errors=True)  # no stale compiled test survives
    _run([npx, "--no-install", "tsc"], BUILD_TIMEOUT_S)
    compiled = (PACKAGE / "dist" / "test").glob("*.test.js")
    tests = sorted(str(p.relative_to(PACKAGE)) for p in compiled)
    assert tests, "tsc compiled no tests"
    env = dict(os.environ)
    env["MEMPP_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env.pop("MEMPP_API_KEY", None)
    output = _run(
        [node, "--test", "--test-concurrency=1", "--test-reporter=tap", *tests],
        TEST_TIMEOUT_S,
        env,
    )
    passed = re.search(r"^# pass (\d+)$", output, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", output, re.MULTILINE)
    assert passed and failed, output[-4000:]
    assert int(failed.group(1)) == 0, output[-8000:]
    assert int(passed.group(1)) >= 35, f"only {passed.group(1)} tests ran:\n{output[-4000:]}"
