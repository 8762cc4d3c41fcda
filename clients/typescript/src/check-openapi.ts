/**
 * `node dist/src/check-openapi.js URL`: fetches URL/openapi.json from a running mempp and
 * prints every disagreement with this client; exit status 1 when there is one.
 */

import { checkOpenApi } from "./openapi.js";

async function main(base: string | undefined): Promise<number> {
  if (!base) {
    console.error("usage: check-openapi.js http://HOST:PORT");
    return 2;
  }
  const url = base.replace(/\/+$/, "") + "/openapi.json";
  const response = await fetch(url, { signal: AbortSignal.timeout(30_000) });
  if (!response.ok) {
    console.error(`${url}: HTTP ${response.status}`);
    return 2;
  }
  const problems = checkOpenApi(await response.json());
  for (const problem of problems) console.error(problem);
  console.log(
    problems.length ? `${problems.length} disagreements with ${url}` : `the client agrees with ${url}`,
  );
  return problems.length ? 1 : 0;
}

main(process.argv[2]).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? error.message : String(error));
    process.exit(2);
  },
);
