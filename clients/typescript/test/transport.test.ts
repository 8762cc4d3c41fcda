/**
 * The client's retry and timeout rules, against a scripted HTTP server on 127.0.0.1: what a
 * real mempp on SQLite cannot be made to do on demand (a 503 with Retry-After, a stalled
 * answer, a dropped connection). Each case says what the server answers, attempt by attempt.
 */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, test } from "node:test";

import {
  ConnectionFailed,
  InvalidInput,
  MemppClient,
  MemppError,
  Timeout,
  Unavailable,
} from "../src/index.js";

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

type Answer = (res: ServerResponse, req: IncomingMessage) => void;

let server: Server;
let base: string;
let script: Answer[] = [];
let seen: Seen[] = [];

const problem =
  (status: number, detail: string, headers: Record<string, string> = {}): Answer =>
  (res) => {
    res.writeHead(status, { "content-type": "application/problem+json", ...headers });
    res.end(JSON.stringify({ type: "about:blank", title: "x", status, detail }));
  };
const ok =
  (body: unknown): Answer =>
  (res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
const stall: Answer = () => {
  // never answers: the client's timeout must end the attempt
};
const drop: Answer = (_res, req) => req.socket.destroy();

const INFO = {
  scope: "s",
  records: 0,
  active: 0,
  archived: 0,
  encoder: null,
  schema_version: 1,
  role: "admin",
};
const ADDED = { id: 7, skipped: null, duplicate_of: null };

before(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      const answer = script.shift() ?? problem(500, "the script ran out");
      answer(res, req);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  script = [];
  seen = [];
});

const client = (extra: Partial<ConstructorParameters<typeof MemppClient>[0]> = {}) =>
  new MemppClient({ baseUrl: base, apiKey: "mempp_k_s", retryDelayMs: 10, ...extra });

test("a read is retried after a 503 with Retry-After, waiting as asked", async () => {
  script = [problem(503, "database away", { "retry-after": "1" }), ok(INFO)];
  const started = Date.now();
  const info = await client().info();
  assert.equal(info.role, "admin");
  assert.equal(seen.length, 2);
  assert.ok(Date.now() - started >= 950, "the Retry-After of 1 s was not waited out");
  assert.equal(seen[0]!.headers.authorization, "Bearer mempp_k_s");
});

test("a write is retried with the same Idempotency-Key; another write gets another key", async () => {
  script = [problem(503, "database away", { "retry-after": "0" }), ok(ADDED), ok(ADDED)];
  const c = client();
  assert.equal((await c.add("hello", { author: "a" })).id, 7);
  await c.add("again");
  assert.equal(seen.length, 3);
  const keys = seen.map((s) => s.headers["idempotency-key"]);
  assert.match(String(keys[0]), /^[0-9a-f-]{36}$/);
  assert.equal(keys[0], keys[1]);
  assert.notEqual(keys[1], keys[2]);
  assert.deepEqual(JSON.parse(seen[0]!.body), { author: "a", text: "hello" });
  assert.equal(seen[0]!.body, seen[1]!.body);
});

test("a caller's Idempotency-Key is sent as given; false sends none and never retries", async () => {
  script = [ok(ADDED)];
  await client().add("x", {}, { idempotencyKey: "order-17" });
  assert.equal(seen[0]!.headers["idempotency-key"], "order-17");
  script = [problem(503, "away", { "retry-after": "0" }), ok(ADDED)];
  await assert.rejects(client().add("x", {}, { idempotencyKey: false }), Unavailable);
  assert.equal(seen.length, 2);
  assert.equal(seen[1]!.headers["idempotency-key"], undefined);
});

test("a Retry-After beyond maxRetryAfterS is raised at once, with the wait the server asked", async () => {
  script = [problem(503, "away for long", { "retry-after": "120" })];
  await assert.rejects(client({ maxRetryAfterS: 5 }).info(), (e: unknown) => {
    assert.ok(e instanceof Unavailable);
    assert.equal(e.retryAfter, 120);
    return true;
  });
  assert.equal(seen.length, 1);
});

test("a 503 without Retry-After and a 422 are not retried", async () => {
  script = [problem(503, "no model")];
  await assert.rejects(client().info(), Unavailable);
  assert.equal(seen.length, 1);
  script = [problem(422, "k: too big")];
  await assert.rejects(client().search("x", { k: 5 }), InvalidInput);
  assert.equal(seen.length, 2);
});

test("retries stop after the configured count and raise the last failure", async () => {
  const away = problem(503, "away", { "retry-after": "0" });
  script = [away, away, away, away];
  await assert.rejects(client({ retries: 2 }).info(), Unavailable);
  assert.equal(seen.length, 3);
});

test("an attempt with no answer times out, and a read is tried again", async () => {
  script = [stall, ok(INFO)];
  const started = Date.now();
  assert.equal((await client({ timeoutMs: 300 }).info()).scope, "s");
  assert.equal(seen.length, 2);
  assert.ok(Date.now() - started >= 290);
  script = [stall, stall];
  await assert.rejects(client({ timeoutMs: 200, retries: 1 }).info(), (e: unknown) => {
    assert.ok(e instanceof Timeout);
    assert.match(e.message, /within 200 ms/);
    return true;
  });
});

test("the caller's AbortSignal ends the call and its retries at once", async () => {
  script = [stall, ok(INFO)];
  const controller = new AbortController();
  setTimeout(() => controller.abort(new Error("user gave up")), 100);
  const started = Date.now();
  await assert.rejects(client().info({ signal: controller.signal }), /user gave up/);
  assert.ok(Date.now() - started < 2_000);
  assert.equal(seen.length, 1);
});

test("a dropped connection is a ConnectionFailed, retried for reads", async () => {
  script = [drop, ok(INFO)];
  assert.equal((await client().info()).records, 0);
  assert.equal(seen.length, 2);
  const nowhere = new MemppClient({ baseUrl: "http://127.0.0.1:9", retries: 0 });
  await assert.rejects(nowhere.info(), ConnectionFailed);
});

test("paths, query strings and bodies are the ones the API defines", async () => {
  script = [
    ok([]),
    ok({ run_id: 1, operation: "archive", record_ids: [3], by: null, reason: "r", actor: "k", at: "t" }),
  ];
  const c = client();
  await c.getMany([3, 4]);
  await c.archive(3, "r");
  assert.equal(seen[0]!.url, "/v1/records?id=3&id=4");
  assert.equal(seen[1]!.url, "/v1/records/3/archive");
  assert.deepEqual(JSON.parse(seen[1]!.body), { reason: "r" });
  await assert.rejects(c.get(0), /not a record id/);
  await assert.rejects(c.getMany([1, 2.5]), /ids\.1: not a record id/);
  assert.throws(() => new MemppClient({ baseUrl: "" }), /baseUrl is required/);
});

test("export yields each JSON line as it arrives, across chunk boundaries, and names a bad line", async () => {
  const rows = [1, 2, 3].map((id) => ({ id, text: `record ${id} – é`, state: "active" }));
  const body = rows.map((r) => JSON.stringify(r) + "\n").join("");
  const bytes = Buffer.from(body);
  script = [
    (res) => {
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      // Cut inside a line and inside a multi-byte character.
      const cuts = [5, bytes.indexOf(Buffer.from("é")) + 1, bytes.length - 3];
      let at = 0;
      const next = () => {
        const cut = cuts.shift();
        if (cut === undefined) return void res.end(bytes.subarray(at));
        res.write(bytes.subarray(at, cut));
        at = cut;
        setTimeout(next, 20);
      };
      next();
    },
    (res) => {
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.end('{"id": 1}\n\nnot json\n');
    },
  ];
  const got = [];
  for await (const line of client().export({ activeOnly: true })) got.push(line);
  assert.deepEqual(got, rows);
  assert.equal(seen[0]!.url, "/v1/export?active_only=true");
  const broken = client().export();
  assert.deepEqual((await broken.next()).value, { id: 1 });
  await assert.rejects(broken.next(), /export line 3 is not JSON/);
});

test("a 200 that is not JSON, and an answer whose body stalls, are raised as such", async () => {
  script = [
    (res) => {
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<html>a proxy's page</html>");
    },
    (res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"scope": "s", ');
      // the rest never comes: the attempt's timeout covers the body too
    },
  ];
  await assert.rejects(client().info(), (e: unknown) => {
    assert.ok(e instanceof MemppError && !(e instanceof Timeout));
    assert.match(e.message, /GET \/v1\/info: the answer is not JSON/);
    return true;
  });
  await assert.rejects(client({ timeoutMs: 300 }).info(), (e: unknown) => {
    assert.ok(e instanceof Timeout);
    assert.match(e.message, /stopped arriving/);
    return true;
  });
});
