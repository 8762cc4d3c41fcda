/**
 * The client's own cost: `MemppClient.search` against the same request sent with bare
 * `fetch`, taking turns, on one server this script starts (SQLite, N synthetic records).
 *
 *   MEMPP_PYTHON=... PYTHONPATH=../../src node dist/bench/overhead.js [records=300] [rounds=200]
 */

import { MemppClient } from "../src/index.js";
import { startMempp } from "../test/server.js";

const records = Number(process.argv[2] ?? 300);
const rounds = Number(process.argv[3] ?? 200);

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<void> {
  const served = await startMempp();
  try {
    const client = new MemppClient({ baseUrl: served.url, apiKey: served.keys.admin });
    const words = ["launch", "budget", "review", "owner", "release", "plan", "risk", "hiring"];
    for (let start = 0; start < records; start += 100) {
      const batch = [];
      for (let i = start; i < Math.min(records, start + 100); i++) {
        const day = String(1 + (i % 28)).padStart(2, "0");
        batch.push({
          text: `Note ${i}: the ${words[i % 8]} of project ${i % 13} changed, see ${words[(i * 3) % 8]}.`,
          author: `person${i % 7}`,
          date: `2024-0${1 + (i % 9)}-${day}`,
        });
      }
      await client.addMany(batch);
    }
    const body = (q: string) => JSON.stringify({ query: q, k: 10, as_of: "2024-06-30" });
    const bare = async (q: string) => {
      const response = await fetch(`${served.url}/v1/search`, {
        method: "POST",
        headers: { authorization: `Bearer ${served.keys.admin}`, "content-type": "application/json" },
        body: body(q),
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      return ((await response.json()) as { hits: unknown[] }).hits;
    };
    const timings = { client: [] as number[], fetch: [] as number[] };
    for (let i = 0; i < 20; i++)
      await client.search(`${words[i % 8]} project`, { k: 10, as_of: "2024-06-30" });
    for (let i = 0; i < rounds; i++) {
      const q = `${words[i % 8]} of project ${i % 13}`;
      const order = i % 2 === 0 ? (["client", "fetch"] as const) : (["fetch", "client"] as const);
      for (const who of order) {
        const t0 = performance.now();
        if (who === "client") await client.search(q, { k: 10, as_of: "2024-06-30" });
        else await bare(q);
        timings[who].push(performance.now() - t0);
      }
    }
    for (const who of ["fetch", "client"] as const) {
      const sorted = [...timings[who]].sort((a, b) => a - b);
      console.log(
        `${who.padEnd(6)} n=${sorted.length} p50=${percentile(sorted, 50).toFixed(2)} ms ` +
          `p95=${percentile(sorted, 95).toFixed(2)} ms`,
      );
    }
  } finally {
    await served.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
