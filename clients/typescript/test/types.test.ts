/**
 * The types inferred from the wire descriptors, checked by the compiler: `npx tsc` fails when
 * an inferred type is not the one written here (the runtime test only proves this file ran).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import type {
  AddResult,
  EvidenceRequest,
  Hit,
  Info,
  MemoryRecord,
  ProblemDocument,
  SearchRequest,
} from "../src/index.js";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const holds = <T extends true>(): T => true as T;

test("inferred wire types", () => {
  holds<Equal<MemoryRecord["state"], "active" | "archived" | "redacted">>();
  holds<Equal<MemoryRecord["author"], string | null>>();
  holds<Equal<MemoryRecord["metadata"], Record<string, unknown> | null>>();
  holds<Equal<Hit["score"], number>>();
  holds<Equal<Hit["leg_ranks"], Record<string, number>>>();
  holds<
    Equal<
      AddResult,
      { id: number | null; skipped: "duplicate" | "empty" | null; duplicate_of?: number | null }
    >
  >();
  holds<Equal<SearchRequest["query"], string>>();
  holds<Equal<SearchRequest["tags_mode"], "any" | "all" | undefined>>();
  holds<
    Equal<
      EvidenceRequest["pack"],
      boolean | { threshold?: number; cap?: number; passage?: number; whole_first?: number } | undefined
    >
  >();
  holds<Equal<Info["encoder"], { name: string; dim: number } | null>>();
  holds<Equal<ProblemDocument["field"], string | null | undefined>>();
  // @ts-expect-error a required field stays required
  const missing: SearchRequest = { k: 5 };
  assert.ok(missing);
});
