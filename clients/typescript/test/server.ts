/**
 * A real `mempp serve` for the tests: a SQLite store in a temporary folder, API keys made
 * with `mempp keys create`, the server on a free 127.0.0.1 port, ready once /readyz is 200.
 * The Python that runs mempp is $MEMPP_PYTHON (default python3).
 */

import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const PYTHON = process.env.MEMPP_PYTHON || "python3";
const READY_TIMEOUT_MS = 180_000;

export interface Served {
  url: string;
  scope: string;
  keys: { admin: string; write: string; read: string };
  log: () => string;
  stop: () => Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

async function mempp(db: string, args: string[]): Promise<string> {
  const { stdout } = await run(PYTHON, ["-m", "mempp", "--db", db, ...args], {
    env: process.env,
    timeout: 120_000,
  });
  return stdout;
}

async function createKey(db: string, scope: string, role: string): Promise<string> {
  const out = JSON.parse(await mempp(db, ["keys", "create", "--scope", scope, "--role", role, "--json"]));
  if (typeof out.token !== "string")
    throw new Error(`mempp keys create printed no token: ${JSON.stringify(out)}`);
  return out.token;
}

/** `serveArgs` go after `serve` (e.g. `--llm-base-url URL --model NAME`). */
export async function startMempp(scope = "team", serveArgs: readonly string[] = []): Promise<Served> {
  const dir = mkdtempSync(join(tmpdir(), "mempp-ts-"));
  const db = join(dir, "memory.db");
  // One at a time: each opens the store (the first creates it).
  const admin = await createKey(db, scope, "admin");
  const write = await createKey(db, scope, "write");
  const read = await createKey(db, scope, "read");
  const port = await freePort();
  let output = "";
  const child: ChildProcess = spawn(
    PYTHON,
    [
      "-m",
      "mempp",
      "--db",
      db,
      "--scope",
      scope,
      "serve",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      ...serveArgs,
    ],
    { env: process.env, stdio: ["ignore", "pipe", "pipe"] },
  );
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(killer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`mempp serve exited (${child.exitCode}):\n${output}`);
    }
    try {
      const response = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5_000) });
      if (response.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`mempp serve not ready within ${READY_TIMEOUT_MS} ms:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return { url, scope, keys: { admin, write, read }, log: () => output, stop };
}
