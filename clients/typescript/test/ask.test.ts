/**
 * `ask` end to end: a real `mempp serve` started with `--llm-base-url` pointing at a scripted
 * OpenAI-protocol chat server on 127.0.0.1, which answers from the evidence it is shown by
 * citing the first record it names, so the test sees what mempp sent and what came back.
 */

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";

import { MemppClient, Unavailable } from "../src/index.js";
import { startMempp, type Served } from "./server.js";

let llm: Server;
let served: Served;
let memory: MemppClient;
let prompts: string[] = [];
let failNext = 0;

before(async () => {
  llm = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      if (!req.url?.endsWith("/chat/completions")) {
        res.writeHead(404).end();
        return;
      }
      if (failNext > 0) {
        failNext -= 1;
        res.writeHead(400, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: "scripted failure" } }));
        return;
      }
      const messages = (JSON.parse(body).messages ?? []) as { content: string }[];
      const prompt = messages.map((m) => m.content).join("\n");
      prompts.push(prompt);
      const cited = /record (\d+)/.exec(prompt);
      const reply = cited
        ? { answer: `From record ${cited[1]}.`, citations: [Number(cited[1])] }
        : { answer: "Not in memory.", citations: [] };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          id: "chatcmpl-1",
          object: "chat.completion",
          created: 0,
          model: "scripted",
          choices: [
            {
              index: 0,
              finish_reason: "stop",
              message: { role: "assistant", content: JSON.stringify(reply) },
            },
          ],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => llm.listen(0, "127.0.0.1", resolve));
  const port = (llm.address() as AddressInfo).port;
  served = await startMempp("team", ["--llm-base-url", `http://127.0.0.1:${port}/v1`, "--model", "scripted"]);
  memory = new MemppClient({ baseUrl: served.url, apiKey: served.keys.read, timeoutMs: 60_000 });
  const writer = new MemppClient({ baseUrl: served.url, apiKey: served.keys.write });
  await writer.addMany([
    { text: "The Vega release is planned for May 3.", author: "ann", date: "2024-04-01" },
    { text: "The Vega release slipped to June 14.", author: "ben", date: "2024-05-20" },
  ]);
});

after(async () => {
  await served?.stop();
  llm?.closeAllConnections();
  await new Promise((resolve) => llm?.close(resolve));
});

test("ask answers from the evidence and cites records it was shown", async () => {
  prompts = [];
  const answer = await memory.ask("When is the Vega release?", { k: 5 });
  assert.match(answer.answer, /^From record \d+\.$/);
  assert.equal(answer.citations.length, 1);
  assert.ok(answer.evidence.includes(answer.citations[0]!));
  assert.equal(prompts.length, 1);
  assert.match(prompts[0]!, /Vega release/);
});

test("ask passes as_of: the model is not shown what was dated later", async () => {
  prompts = [];
  const answer = await memory.ask("When is the Vega release?", { as_of: "2024-04-30" });
  assert.equal(answer.evidence.length, 1);
  assert.ok(prompts[0]!.includes("May 3"));
  assert.ok(!prompts[0]!.includes("June 14"), "a record dated after as_of reached the model");
});

test("a model that fails is an Unavailable (502) naming the model", async () => {
  failNext = 10;
  try {
    await assert.rejects(memory.ask("When is the Vega release?"), (e: unknown) => {
      assert.ok(e instanceof Unavailable);
      assert.equal(e.status, 502);
      assert.match(e.message, /language model failed/);
      return true;
    });
  } finally {
    failNext = 0;
  }
});
