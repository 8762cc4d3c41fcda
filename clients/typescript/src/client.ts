/**
 * `MemppClient`: mempp's HTTP API (/v1) as typed calls over the global `fetch`, with the
 * API's problem documents raised as error classes, a timeout per attempt, and retries only
 * where a repeat cannot store twice: reads, and writes sent with an `Idempotency-Key`.
 */

import { ConnectionFailed, MemppError, Timeout, Unavailable, errorFor } from "./errors.js";
import {
  JSONL,
  ROUTES,
  type AddResult,
  type Answer,
  type AskRequest,
  type Changes,
  type ChangesRequest,
  type Correction,
  type DocumentInput,
  type EvidenceBlock,
  type EvidenceRequest,
  type ExportedRecord,
  type HistoryEntry,
  type HistoryRequest,
  type Hit,
  type Info,
  type IngestResult,
  type MemoryRecord,
  type SearchRequest,
  type UndoResult,
} from "./wire.js";

export interface ClientOptions {
  /** Where mempp serves, e.g. http://127.0.0.1:8765 (a path prefix is kept). */
  baseUrl: string;
  /** `mempp_<id>_<secret>`; default `MEMPP_API_KEY` from the environment; none on a keyless server. */
  apiKey?: string;
  /** Milliseconds each attempt may take before it is aborted (default 30,000). */
  timeoutMs?: number;
  /** Further attempts after the first, for calls that may be retried (default 2). */
  retries?: number;
  /** First backoff between attempts, doubled each time (default 200 ms). */
  retryDelayMs?: number;
  /** The longest `Retry-After` (seconds) the client waits out; beyond it the 503 is raised (default 30). */
  maxRetryAfterS?: number;
  /** Headers sent with every request (a request id, a tracing header). */
  headers?: Record<string, string>;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

export interface CallOptions {
  /** Aborts the call, its retries and their waits. */
  signal?: AbortSignal;
  /** This call's per-attempt timeout (overrides the client's). */
  timeoutMs?: number;
  /** This call's retries (overrides the client's); 0 sends it once. */
  retries?: number;
  /**
   * Writes only: the `Idempotency-Key` sent with every attempt of this call (default: a new
   * random UUID per call). `false` sends none, and then the write is never retried.
   */
  idempotencyKey?: string | false;
}

type Fields<T, K extends keyof T> = Omit<T, K>;
export type SearchParams = Fields<SearchRequest, "query">;
export type EvidenceParams = Fields<EvidenceRequest, "query">;
export type AskParams = Fields<AskRequest, "question">;
export type HistoryParams = Fields<HistoryRequest, "query" | "record_id">;
export type ChangesParams = Fields<ChangesRequest, "since" | "until">;
export type DocumentFields = Fields<DocumentInput, "text">;

interface Call {
  method: "GET" | "POST";
  path: string;
  query?: URLSearchParams;
  json?: unknown;
  body?: string;
  contentType?: string;
  /** Safe to repeat without a key: the call only reads. */
  read: boolean;
}

interface Sent {
  response: Response;
  /** Disarms the attempt's timeout. */
  disarm: () => void;
  /** Disarms the timeout and unlinks the caller's signal. */
  done: () => void;
  /** Whether the attempt's timeout fired (while the body was read). */
  timedOut: () => boolean;
}

const DEFAULT_TIMEOUT_MS = 30_000;

export class MemppClient {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly retryDelayMs: number;
  private readonly maxRetryAfterS: number;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions) {
    if (!options || typeof options.baseUrl !== "string" || options.baseUrl === "") {
      throw new TypeError("baseUrl is required, e.g. http://127.0.0.1:8765");
    }
    const url = new URL(options.baseUrl); // throws on a malformed address, naming it
    this.baseUrl = url.href.replace(/\/+$/, "");
    const fromEnv = typeof process !== "undefined" ? process.env?.MEMPP_API_KEY : undefined;
    this.apiKey = options.apiKey ?? (fromEnv || undefined);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.retries = options.retries ?? 2;
    this.retryDelayMs = options.retryDelayMs ?? 200;
    this.maxRetryAfterS = options.maxRetryAfterS ?? 30;
    this.headers = { ...(options.headers ?? {}) };
    const impl = options.fetch ?? globalThis.fetch;
    if (typeof impl !== "function") throw new TypeError("no fetch: use Node >= 18 or pass options.fetch");
    this.fetchImpl = impl;
  }

  // -- writes ---------------------------------------------------------------------------------

  /** Store one document whole (`Memory.add`): its new id, or why it was skipped. */
  add(text: string, fields: DocumentFields = {}, options?: CallOptions): Promise<AddResult> {
    return this.json(write(ROUTES.add.path, { ...fields, text }), options);
  }

  /** Store up to 1,000 documents in one transaction (`Memory.add_many`), one result each. */
  async addMany(documents: readonly DocumentInput[], options?: CallOptions): Promise<AddResult[]> {
    const out = await this.json<{ results: AddResult[] }>(
      write(ROUTES.addMany.path, { records: documents }),
      options,
    );
    return out.results;
  }

  /** Store documents from JSON Lines (`POST /v1/ingest`): a string, bytes, or documents. Sent
   * once, without an Idempotency-Key (the server replays no streamed upload; ingesting again
   * skips the documents already stored). */
  ingest(
    lines: string | Uint8Array | Iterable<DocumentInput | ExportedRecord>,
    options?: CallOptions,
  ): Promise<IngestResult> {
    let body: string;
    if (typeof lines === "string") body = lines;
    else if (lines instanceof Uint8Array) body = new TextDecoder().decode(lines);
    else body = Array.from(lines, (d) => JSON.stringify(d) + "\n").join("");
    return this.json(
      { method: "POST", path: ROUTES.ingest.path, body, contentType: JSONL, read: false },
      { ...options, idempotencyKey: false },
    );
  }

  /** Record that record `by` supersedes record `id` (role admin). */
  async supersede(id: number, by: number, reason: string, options?: CallOptions): Promise<Correction> {
    return this.json(write(recordPath(ROUTES.supersede.path, id), { by, reason }), options);
  }

  /** Take a record out of every search; it stays in the store (role admin, undoable). */
  async archive(id: number, reason: string, options?: CallOptions): Promise<Correction> {
    return this.json(write(recordPath(ROUTES.archive.path, id), { reason }), options);
  }

  /** Erase a record's content for good; a tombstone stays (role admin, not undoable). */
  async redact(id: number, reason: string, options?: CallOptions): Promise<Correction> {
    return this.json(write(recordPath(ROUTES.redact.path, id), { reason }), options);
  }

  /** Undo a correction or consolidation run (role admin). */
  async undo(runId: number, options?: CallOptions): Promise<UndoResult> {
    const path = ROUTES.undo.path.replace("{run_id}", String(checkId(runId, "runId")));
    return this.json({ method: "POST", path, read: false }, options);
  }

  // -- reads ----------------------------------------------------------------------------------

  /** One record whole, in any state (`Memory.get`). */
  async get(id: number, options?: CallOptions): Promise<MemoryRecord> {
    return this.json({ method: "GET", path: recordPath(ROUTES.get.path, id), read: true }, options);
  }

  /** Records whole, in the order asked (repeats once); RecordNotFound names the first missing. */
  async getMany(ids: readonly number[], options?: CallOptions): Promise<MemoryRecord[]> {
    const query = new URLSearchParams();
    ids.forEach((id, i) => query.append("id", String(checkId(id, `ids.${i}`))));
    return this.json({ method: "GET", path: ROUTES.getMany.path, query, read: true }, options);
  }

  /** Ranked records for a query (`Memory.search`), with the as-of bound and filters. */
  async search(query: string, params: SearchParams = {}, options?: CallOptions): Promise<Hit[]> {
    const out = await this.json<{ hits: Hit[] }>(read(ROUTES.search.path, { ...params, query }), options);
    return out.hits;
  }

  /** The dated, attributed evidence block for a query (`Memory.evidence`). */
  evidence(query: string, params: EvidenceParams = {}, options?: CallOptions): Promise<EvidenceBlock> {
    return this.json(read(ROUTES.evidence.path, { ...params, query }), options);
  }

  /** An answer from the evidence by the server's language model (`Memory.ask`). */
  ask(question: string, params: AskParams = {}, options?: CallOptions): Promise<Answer> {
    return this.json(read(ROUTES.ask.path, { ...params, question }), options);
  }

  /** The timeline of one subject: a record id, or the best hit of a query text. */
  async history(
    subject: number | string,
    params: HistoryParams = {},
    options?: CallOptions,
  ): Promise<HistoryEntry[]> {
    const which =
      typeof subject === "number" ? { record_id: checkId(subject, "subject") } : { query: subject };
    const out = await this.json<{ entries: HistoryEntry[] }>(
      read(ROUTES.history.path, { ...params, ...which }),
      options,
    );
    return out.entries;
  }

  /** What changed between two event days, both included (`Memory.changes`). */
  changes(since: string, until: string, params: ChangesParams = {}, options?: CallOptions): Promise<Changes> {
    return this.json(read(ROUTES.changes.path, { ...params, since, until }), options);
  }

  /** Every manual correction of this scope, oldest first, undone ones too. */
  async corrections(options?: CallOptions): Promise<Correction[]> {
    const out = await this.json<{ corrections: Correction[] }>(
      { method: "GET", path: ROUTES.corrections.path, read: true },
      options,
    );
    return out.corrections;
  }

  /** What this key's scope holds, the encoder, the schema version and the key's role. */
  info(options?: CallOptions): Promise<Info> {
    return this.json({ method: "GET", path: ROUTES.info.path, read: true }, options);
  }

  /**
   * Every record as the export streams it, one object per JSON line, read as it arrives. A
   * failure before the first byte is retried like any read; one mid-stream is raised.
   */
  async *export(
    params: { activeOnly?: boolean } = {},
    options?: CallOptions,
  ): AsyncGenerator<ExportedRecord, void, undefined> {
    const query = new URLSearchParams({ active_only: String(params.activeOnly ?? false) });
    const { response, disarm, done } = await this.send(
      { method: "GET", path: ROUTES.export.path, query, read: true },
      options,
    );
    disarm(); // the timeout bounds the wait for the answer; the caller's signal bounds the stream
    try {
      yield* lines(response);
    } finally {
      done();
    }
  }

  // -- transport ------------------------------------------------------------------------------

  private async json<T>(call: Call, options?: CallOptions): Promise<T> {
    const sent = await this.send(call, options);
    let text: string;
    try {
      text = await sent.response.text();
    } catch (cause) {
      if (options?.signal?.aborted) throw options.signal.reason ?? cause;
      const what = `${call.method} ${call.path}: the answer stopped arriving`;
      throw sent.timedOut()
        ? new Timeout(`${what} within the timeout`, 0, undefined, { cause })
        : new ConnectionFailed(what, 0, undefined, { cause });
    } finally {
      sent.done();
    }
    try {
      return JSON.parse(text) as T;
    } catch (cause) {
      throw new MemppError(
        `${call.method} ${call.path}: the answer is not JSON`,
        sent.response.status,
        undefined,
        {
          cause,
        },
      );
    }
  }

  /** One call: attempts until success, a non-retryable error, or the retries are spent. */
  private async send(call: Call, options: CallOptions = {}): Promise<Sent> {
    const headers: Record<string, string> = { accept: "application/json", ...this.headers };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    let body: string | undefined;
    if (call.json !== undefined) {
      body = JSON.stringify(call.json);
      headers["content-type"] = "application/json";
    } else if (call.body !== undefined) {
      body = call.body;
      headers["content-type"] = call.contentType ?? "application/octet-stream";
    }
    let repeatable = call.read;
    if (!call.read && options.idempotencyKey !== false) {
      headers["idempotency-key"] = options.idempotencyKey ?? (await newKey());
      repeatable = true;
    }
    const url = this.baseUrl + call.path + (call.query ? `?${call.query}` : "");
    const attempts = 1 + (repeatable ? Math.max(0, options.retries ?? this.retries) : 0);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    let delay = this.retryDelayMs;
    for (let attempt = 1; ; attempt++) {
      let failure: MemppError;
      try {
        const sent = await this.attempt(url, call.method, headers, body, timeoutMs, options.signal);
        if (sent.response.ok) return sent;
        try {
          const { response } = sent;
          failure = errorFor(response.status, await readBody(response), response.headers);
        } finally {
          sent.done();
        }
      } catch (error) {
        if (!(error instanceof MemppError) || options.signal?.aborted) throw error;
        failure = error;
      }
      const wait = attempt < attempts ? this.retryWait(failure, delay) : undefined;
      if (wait === undefined) throw failure;
      await sleep(wait, options.signal);
      delay *= 2;
    }
  }

  /** Milliseconds to wait before repeating after `failure`, or undefined to raise it. */
  private retryWait(failure: MemppError, backoff: number): number | undefined {
    if (failure instanceof ConnectionFailed || failure instanceof Timeout) return backoff;
    if (failure instanceof Unavailable && failure.status === 504) return backoff;
    if (failure instanceof Unavailable && failure.status === 503 && failure.retryAfter !== undefined) {
      // Only a 503 that says when to come back is transient (a database away); one without
      // (no model configured for ask) would answer the same again.
      if (failure.retryAfter > this.maxRetryAfterS) return undefined;
      return Math.max(failure.retryAfter * 1000, backoff);
    }
    return undefined;
  }

  private async attempt(
    url: string,
    method: string,
    headers: Record<string, string>,
    body: string | undefined,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<Sent> {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const onAbort = () => controller.abort(signal?.reason);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener("abort", onAbort, { once: true });
    // The timer stays armed until done(), so a body that stalls is cut off too.
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    try {
      const response = await this.fetchImpl(url, { method, headers, body, signal: controller.signal });
      return { response, done, disarm: () => clearTimeout(timer), timedOut: () => timedOut };
    } catch (cause) {
      done();
      if (signal?.aborted) throw signal.reason ?? cause;
      if (timedOut) {
        throw new Timeout(`${method} ${url}: no answer within ${timeoutMs} ms`, 0, undefined, { cause });
      }
      const why =
        cause instanceof Error
          ? ((cause.cause as Error | undefined)?.message ?? cause.message)
          : String(cause);
      throw new ConnectionFailed(`${method} ${url}: ${why}`, 0, undefined, { cause });
    }
  }
}

/** The JSON objects of a JSON Lines body, as its chunks arrive. */
async function* lines(response: Response): AsyncGenerator<ExportedRecord, void, undefined> {
  if (!response.body) return;
  const decoder = new TextDecoder();
  let pending = "";
  let number = 0;
  const parse = (text: string): ExportedRecord => {
    try {
      return JSON.parse(text) as ExportedRecord;
    } catch (cause) {
      throw new MemppError(`export line ${number} is not JSON`, response.status, undefined, { cause });
    }
  };
  // A reader, not `for await`: not every browser's ReadableStream is async-iterable.
  const reader = response.body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      for (let cut = pending.indexOf("\n"); cut >= 0; cut = pending.indexOf("\n")) {
        const text = pending.slice(0, cut);
        pending = pending.slice(cut + 1);
        number += 1;
        if (text.trim() !== "") yield parse(text);
      }
    }
    finished = true;
  } finally {
    // A caller that stops early (break, an error) releases the connection.
    if (!finished) await reader.cancel().catch(() => undefined);
  }
  pending += decoder.decode();
  number += 1;
  if (pending.trim() !== "") yield parse(pending);
}

function read(path: string, json: unknown): Call {
  return { method: "POST", path, json, read: true };
}

function write(path: string, json: unknown): Call {
  return { method: "POST", path, json, read: false };
}

function checkId(id: number, name: string): number {
  if (!Number.isSafeInteger(id) || id < 1) throw new TypeError(`${name}: not a record id: ${id}`);
  return id;
}

function recordPath(template: string, id: number): string {
  return template.replace("{record_id}", String(checkId(id, "id")));
}

async function readBody(response: Response): Promise<unknown> {
  let text: string;
  try {
    text = await response.text();
  } catch {
    return ""; // the status still says what went wrong
  }
  const kind = response.headers.get("content-type") ?? "";
  if (kind.includes("json")) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return text;
}

async function newKey(): Promise<string> {
  const web = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (web?.randomUUID) return web.randomUUID();
  const { randomUUID } = await import("node:crypto"); // Node 18 has no global crypto by default
  return randomUUID();
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
