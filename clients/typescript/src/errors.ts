/**
 * The errors a call can raise: one class per kind of problem document the API answers, named
 * as mempp's own exceptions are, so a caller catches `RecordNotFound` rather than testing 404.
 */

import type { ProblemDocument } from "./wire.js";

/** Any error mempp answered (a problem document) or the client met (a timeout, no server). */
export class MemppError extends Error {
  /** The HTTP status, or 0 when no response came (network failure, timeout). */
  readonly status: number;
  /** The problem document as the server sent it, when there was one. */
  readonly problem: ProblemDocument | undefined;
  /** The offending input the server named (`records.3.date`, `k`), if any. */
  readonly field: string | undefined;

  constructor(message: string, status: number, problem?: ProblemDocument, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.problem = problem;
    this.field = problem?.field ?? undefined;
  }
}

/** 400 or 422: a value the API cannot accept; `field` names it. */
export class InvalidInput extends MemppError {}
/** 404: no such record or run in this key's scope (or no such route). */
export class RecordNotFound extends MemppError {}
/** 401: no key, or an unknown, malformed or revoked one. */
export class Unauthorized extends MemppError {}
/** 403: the key's role does not allow the operation. */
export class Forbidden extends MemppError {}
/** 409: a correction found a row changed since; or an idempotency key reused with another body. */
export class Conflict extends MemppError {}
/** 413: a body over the server's limit. */
export class PayloadTooLarge extends MemppError {}

/** 503 (or 502/504): the store, the model or the server cannot serve now. */
export class Unavailable extends MemppError {
  /** Seconds the server asked to wait (its `Retry-After`), when it said. */
  readonly retryAfter: number | undefined;

  constructor(
    message: string,
    status: number,
    problem?: ProblemDocument,
    retryAfter?: number,
    options?: ErrorOptions,
  ) {
    super(message, status, problem, options);
    this.retryAfter = retryAfter;
  }
}

/** No answer within the call's timeout (the request was aborted). */
export class Timeout extends MemppError {}
/** The request could not reach the server (refused, reset, DNS). */
export class ConnectionFailed extends MemppError {}

/** `Retry-After` in seconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const when = Date.parse(text);
  if (Number.isNaN(when)) return undefined;
  return Math.max(0, (when - now) / 1000);
}

/** The error for a non-2xx response, from its status, problem document and headers. */
export function errorFor(status: number, body: unknown, headers: Headers): MemppError {
  const problem = isProblem(body) ? body : undefined;
  const detail = problem?.detail ?? (typeof body === "string" && body ? body : `HTTP ${status}`);
  switch (status) {
    case 400:
    case 422:
      return new InvalidInput(detail, status, problem);
    case 401:
      return new Unauthorized(detail, status, problem);
    case 403:
      return new Forbidden(detail, status, problem);
    case 404:
      return new RecordNotFound(detail, status, problem);
    case 409:
      return new Conflict(detail, status, problem);
    case 413:
      return new PayloadTooLarge(detail, status, problem);
    case 502:
    case 503:
    case 504:
      return new Unavailable(detail, status, problem, parseRetryAfter(headers.get("retry-after")));
    default:
      return new MemppError(detail, status, problem);
  }
}

function isProblem(body: unknown): body is ProblemDocument {
  if (typeof body !== "object" || body === null) return false;
  const b = body as Record<string, unknown>;
  return typeof b.status === "number" && typeof b.detail === "string";
}
