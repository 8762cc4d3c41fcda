/**
 * MemppClient against a real `mempp serve` (SQLite, keys, MiniLM): every method, every error
 * class the server can produce, the as_of and known_at filters, and the OpenAPI check.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Conflict,
  Forbidden,
  InvalidInput,
  MemppClient,
  RecordNotFound,
  Unauthorized,
  Unavailable,
  checkOpenApi,
  type ExportedRecord,
} from "../src/index.js";
import { startMempp, type Served } from "./server.js";

let served: Served;
let admin: MemppClient;
const ids: Record<string, number> = {};

before(async () => {
  served = await startMempp();
  admin = new MemppClient({ baseUrl: served.url, apiKey: served.keys.admin, timeoutMs: 60_000 });
  const plan = await admin.add("The launch of Atlas is planned for March 10.", {
    author: "alice",
    date: "2024-02-01",
    tags: ["atlas", "launch"],
    thread: "atlas-planning",
  });
  assert.equal(plan.skipped, null);
  ids.plan = plan.id!;
  const [moved, budget] = await admin.addMany([
    {
      text: "Atlas launch moved to April 2 after the security review.",
      author: "bob",
      date: "2024-03-05",
      tags: ["atlas", "launch"],
      thread: "atlas-planning",
    },
    {
      text: "The Atlas budget is 40,000 euros for the first quarter.",
      author: "carol",
      date: "2024-01-15",
      tags: ["atlas", "budget"],
      metadata: { ticket: "FIN-7" },
    },
  ]);
  ids.moved = moved!.id!;
  ids.budget = budget!.id!;
});

after(async () => {
  await served?.stop();
});

describe("the OpenAPI check", () => {
  test("the client agrees with the served /openapi.json", async () => {
    const doc = await (await fetch(`${served.url}/openapi.json`)).json();
    assert.deepEqual(checkOpenApi(doc), []);
  });

  test("it fails on drift: a renamed route, a retyped field, a dropped field, a new enum value", async () => {
    const doc = await (await fetch(`${served.url}/openapi.json`)).json();
    doc.paths["/v1/changes2"] = doc.paths["/v1/changes"];
    delete doc.paths["/v1/changes"];
    doc.components.schemas.RecordOut.properties.author = { type: "integer" };
    delete doc.components.schemas.HitOut.properties.score;
    doc.components.schemas.SearchIn.properties.k = { type: "string" };
    doc.components.schemas.CorrectionOut.properties.operation.enum.push("merge");
    doc.components.schemas.CorrectionIn.required = ["reason", "ticket"];
    doc.components.schemas.CorrectionIn.properties.ticket = { type: "string" };
    doc.paths["/v1/info"].get.parameters = [
      { name: "tenant", in: "query", required: true, schema: { type: "string" } },
    ];
    const problems = checkOpenApi(doc);
    const expect = [
      /changes: POST \/v1\/changes: no such route/,
      /get: .* response\.author: integer is not one of string \| null/,
      /search: .* response\.hits\[\]\.score: the server's HitOut has no such field/,
      /search: .* body\.k: integer where string is expected/,
      /corrections: .*"merge" not in enum/,
      /archive: .* body\.ticket: required but never given/,
      /info: GET \/v1\/info: the server requires the query parameter tenant/,
    ];
    for (const pattern of expect) {
      assert.ok(
        problems.some((p) => pattern.test(p)),
        `${pattern} not in:\n${problems.join("\n")}`,
      );
    }
  });
});

describe("reads", () => {
  test("info names the key's scope and role and counts the records", async () => {
    const info = await admin.info();
    assert.equal(info.scope, "team");
    assert.equal(info.role, "admin");
    assert.ok(info.records >= 3);
    assert.equal(info.encoder?.dim, 384);
  });

  test("get and getMany return the records whole", async () => {
    const record = await admin.get(ids.budget!);
    assert.equal(record.author, "carol");
    assert.equal(record.date, "2024-01-15");
    assert.deepEqual(record.metadata, { ticket: "FIN-7" });
    assert.equal(record.state, "active");
    const many = await admin.getMany([ids.moved!, ids.plan!, ids.moved!]);
    assert.deepEqual(
      many.map((r) => r.id),
      [ids.moved, ids.plan],
    );
  });

  test("search ranks, and as_of keeps later revisions out", async () => {
    const now = await admin.search("when is the Atlas launch", { k: 3 });
    assert.ok(now.length >= 2);
    assert.equal(now[0]!.rank, 1);
    assert.ok(now.some((h) => h.id === ids.moved));
    const february = await admin.search("when is the Atlas launch", { as_of: "2024-02-15", k: 3 });
    assert.ok(february.some((h) => h.id === ids.plan));
    assert.ok(!february.some((h) => h.id === ids.moved), "a record dated 2024-03-05 passed as_of 2024-02-15");
    const bob = await admin.search("Atlas launch", { author: "bob" });
    assert.deepEqual(
      bob.map((h) => h.id),
      [ids.moved],
    );
    const budget = await admin.search("Atlas", { tags: ["budget"] });
    assert.deepEqual(
      budget.map((h) => h.id),
      [ids.budget],
    );
  });

  test("known_at keeps out what the memory had not received by then", async () => {
    // A moment between two ingestions, on the machine's one clock (the server is local).
    await new Promise((resolve) => setTimeout(resolve, 50));
    const moment = new Date().toISOString();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const late = await admin.add("Atlas retrospective: the launch went well.", {
      author: "dave",
      date: "2024-04-20",
    });
    assert.ok(Date.parse((await admin.get(late.id!)).ingested_at) > Date.parse(moment));
    const then = await admin.search("Atlas launch", { known_at: moment, k: 10 });
    assert.ok(then.some((h) => h.id === ids.plan));
    assert.ok(!then.some((h) => h.id === late.id), "a record ingested later passed known_at");
    const latest = await admin.search("Atlas launch", { k: 10 });
    assert.ok(latest.some((h) => h.id === late.id));
    assert.deepEqual(await admin.search("Atlas launch", { known_at: "2000-01-01" }), []);
  });

  test("evidence renders dated, attributed records within the budget", async () => {
    const block = await admin.evidence("Atlas budget", { k: 2, budget: 2000 });
    assert.match(block.text, new RegExp(`record ${ids.budget}`));
    assert.ok(block.text.length <= 2000);
    assert.ok(block.rows.some((r) => r.id === ids.budget));
    const old = await admin.evidence("Atlas launch", {
      as_of: "2024-02-15",
      pack: { threshold: 400, cap: 300, passage: 200 },
    });
    assert.ok(!old.rows.some((r) => r.id === ids.moved));
  });

  test("history by id and by query, oldest first", async () => {
    const byId = await admin.history(ids.plan!);
    assert.ok(byId.some((e) => e.id === ids.plan && e.reasons.includes("subject")));
    const byQuery = await admin.history("Atlas launch date", { limit: 5 });
    assert.ok(byQuery.length >= 1);
    const dates = byQuery.map((e) => e.datetime ?? "");
    assert.deepEqual(dates, [...dates].sort());
    const before = await admin.history(ids.plan!, { as_of: "2024-02-15" });
    assert.ok(!before.some((e) => e.id === ids.moved));
  });

  test("changes lists what entered a window", async () => {
    const march = await admin.changes("2024-03-01", "2024-03-31");
    assert.deepEqual(
      march.entered.map((r) => r.id),
      [ids.moved],
    );
    assert.equal(march.since.slice(0, 10), "2024-03-01");
  });

  test("export streams every record as JSON Lines", async () => {
    const lines: ExportedRecord[] = [];
    for await (const line of admin.export()) lines.push(line);
    const info = await admin.info();
    assert.equal(lines.length, info.records);
    const budget = lines.find((l) => l.id === ids.budget);
    assert.equal(budget?.author, "carol");
    assert.equal(budget?.scope, "team");
  });
});

describe("writes", () => {
  test("add reports a duplicate with the record it repeats", async () => {
    const again = await admin.add("The launch of Atlas is planned for March 10.", {
      author: "alice",
      date: "2024-02-01",
    });
    assert.equal(again.id, null);
    assert.equal(again.skipped, "duplicate");
    assert.equal(again.duplicate_of, ids.plan);
    const empty = await admin.add("   ");
    assert.equal(empty.skipped, "empty");
  });

  test("ingest stores JSON Lines documents and reports each line", async () => {
    const result = await admin.ingest([
      { text: "Ingested note one about Zephyr.", author: "erin", date: "2024-05-01" },
      { text: "Ingested note two about Zephyr.", author: "erin", date: "2024-05-02" },
    ]);
    assert.equal(result.added, 2);
    assert.equal(result.ids.length, 2);
    const bad = await admin.ingest('{"text": "fine"}\nnot json\n');
    assert.equal(bad.added, 1);
    assert.equal(bad.failed, 1);
    assert.equal(bad.failures[0]!.line, 2);
  });

  test("supersede, corrections, undo, archive and redact, attributed to the key", async () => {
    const a = await admin.add("Zephyr owner is Frank.", { author: "ops", date: "2024-06-01" });
    const b = await admin.add("Zephyr owner is Grace now.", { author: "ops", date: "2024-06-10" });
    const link = await admin.supersede(a.id!, b.id!, "ownership moved");
    assert.equal(link.operation, "supersede");
    assert.equal(link.by, b.id);
    assert.match(link.actor ?? "", /^[A-Za-z0-9]+/);
    assert.equal((await admin.get(a.id!)).superseded_by, b.id);
    const listed = await admin.corrections();
    assert.ok(listed.some((c) => c.run_id === link.run_id && c.reason === "ownership moved"));
    const undone = await admin.undo(link.run_id);
    assert.equal(undone.run_id, link.run_id);
    assert.equal((await admin.get(a.id!)).superseded_by, null);

    const archived = await admin.archive(a.id!, "obsolete");
    assert.equal(archived.operation, "archive");
    assert.equal((await admin.get(a.id!)).state, "archived");
    const active: ExportedRecord[] = [];
    for await (const line of admin.export({ activeOnly: true })) active.push(line);
    assert.ok(!active.some((l) => l.id === a.id));

    const erased = await admin.redact(b.id!, "erasure request");
    assert.equal(erased.operation, "redact");
    const tombstone = await admin.get(b.id!);
    assert.equal(tombstone.state, "redacted");
    assert.equal(tombstone.text, "");
  });
});

describe("errors", () => {
  test("InvalidInput names the field of a 422", async () => {
    await assert.rejects(
      admin.addMany([{ text: "fine" }, { text: "bad date", date: "2024-02-30" }]),
      (error: unknown) => {
        assert.ok(error instanceof InvalidInput);
        assert.equal(error.status, 422);
        assert.equal(error.field, "records.1.date");
        assert.match(error.message, /2024-02-30/);
        return true;
      },
    );
    await assert.rejects(
      admin.search("x", { k: 0 }),
      (e: unknown) => e instanceof InvalidInput && e.field === "k",
    );
    await assert.rejects(
      admin.search("x", { since: "2024-03-01", as_of: "2024-02-01" }),
      (e: unknown) => e instanceof InvalidInput && e.field === "since",
    );
  });

  test("RecordNotFound for an id the scope lacks (404), for get, getMany, history and undo", async () => {
    await assert.rejects(admin.get(987654), (e: unknown) => e instanceof RecordNotFound && e.status === 404);
    await assert.rejects(admin.getMany([ids.plan!, 987654]), RecordNotFound);
    await assert.rejects(admin.history(987654), RecordNotFound);
    await assert.rejects(admin.undo(987654), RecordNotFound);
  });

  test("Unauthorized without a key, with a wrong one, and the key from MEMPP_API_KEY", async () => {
    const saved = process.env.MEMPP_API_KEY;
    try {
      delete process.env.MEMPP_API_KEY;
      await assert.rejects(new MemppClient({ baseUrl: served.url }).info(), Unauthorized);
      const wrong = new MemppClient({ baseUrl: served.url, apiKey: "mempp_nope_nope" });
      await assert.rejects(wrong.info(), (e: unknown) => e instanceof Unauthorized && e.status === 401);
      process.env.MEMPP_API_KEY = served.keys.read;
      const fromEnv = new MemppClient({ baseUrl: served.url });
      assert.equal((await fromEnv.info()).role, "read");
    } finally {
      if (saved === undefined) delete process.env.MEMPP_API_KEY;
      else process.env.MEMPP_API_KEY = saved;
    }
  });

  test("Forbidden when the key's role does not allow it (403)", async () => {
    const reader = new MemppClient({ baseUrl: served.url, apiKey: served.keys.read });
    await assert.rejects(
      reader.add("a reader may not write"),
      (e: unknown) => e instanceof Forbidden && e.status === 403,
    );
    const writer = new MemppClient({ baseUrl: served.url, apiKey: served.keys.write });
    assert.ok((await writer.add("a writer may add, about Orion.")).id);
    await assert.rejects(writer.archive(ids.plan!, "not allowed"), Forbidden);
    assert.equal((await admin.get(ids.plan!)).state, "active");
  });

  test("Conflict when an undo finds its rows changed since (409)", async () => {
    const a = await admin.add("Orion lead is Hana.", { date: "2024-07-01" });
    const b = await admin.add("Orion lead is Ivan.", { date: "2024-07-09" });
    const link = await admin.supersede(a.id!, b.id!, "lead changed");
    await admin.archive(a.id!, "later change");
    await assert.rejects(admin.undo(link.run_id), (e: unknown) => e instanceof Conflict && e.status === 409);
    assert.equal((await admin.get(a.id!)).state, "archived");
  });

  test("Unavailable for ask without a language model (503), raised at once, not retried", async () => {
    const started = Date.now();
    await assert.rejects(admin.ask("when is the launch?"), (e: unknown) => {
      assert.ok(e instanceof Unavailable);
      assert.equal(e.status, 503);
      assert.equal(e.retryAfter, undefined);
      assert.match(e.message, /language model/);
      return true;
    });
    assert.ok(Date.now() - started < 5_000);
  });

  test("every write carries an Idempotency-Key, a new one per call", async () => {
    const sent: (string | null)[] = [];
    const recording: typeof fetch = (input, init) => {
      sent.push(new Headers(init?.headers).get("idempotency-key"));
      return fetch(input, init);
    };
    const client = new MemppClient({ baseUrl: served.url, apiKey: served.keys.admin, fetch: recording });
    await client.add("Idempotency one.");
    await client.add("Idempotency two.");
    await client.search("Idempotency");
    assert.equal(sent.length, 3);
    assert.match(sent[0]!, /^[0-9a-f-]{36}$/);
    assert.notEqual(sent[0], sent[1]);
    assert.equal(sent[2], null);
  });
});
