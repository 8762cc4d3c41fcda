/**
 * mempp's /v1 wire format as the client uses it: every request and response model, and the
 * route table. The types exported from here are inferred from these descriptors, and
 * `checkOpenApi` compares the same descriptors with a server's /openapi.json.
 */

import {
  array,
  bool,
  int,
  json,
  lit,
  map,
  nullable,
  num,
  object,
  opt,
  str,
  union,
  type Infer,
  type ObjectType,
  type Type,
} from "./schema.js";

// -- requests ---------------------------------------------------------------------------------

export const DocumentIn = object("DocumentIn", {
  text: str,
  author: opt(nullable(str)),
  date: opt(nullable(str)),
  tags: opt(array(str)),
  source: opt(nullable(str)),
  thread: opt(nullable(str)),
  metadata: opt(nullable(json)),
});

export const DocumentsIn = object("DocumentsIn", { records: array(DocumentIn) });

const filterFields = {
  as_of: opt(nullable(str)),
  known_at: opt(nullable(str)),
  since: opt(nullable(str)),
  author: opt(nullable(str)),
  tags: opt(nullable(array(str))),
  tags_mode: opt(lit("any", "all")),
  thread: opt(nullable(str)),
  source: opt(nullable(str)),
} as const;

export const SearchIn = object("SearchIn", {
  ...filterFields,
  query: str,
  k: opt(nullable(int)),
  preset: opt(nullable(str)),
});

export const PackIn = object("PackIn", {
  threshold: opt(int),
  cap: opt(int),
  passage: opt(int),
  whole_first: opt(int),
});

export const EvidenceIn = object("EvidenceIn", {
  ...filterFields,
  query: str,
  k: opt(nullable(int)),
  preset: opt(nullable(str)),
  budget: opt(nullable(int)),
  style: opt(lit("headers", "paper")),
  pack: opt(union(PackIn, bool)),
});

export const AskIn = object("AskIn", {
  ...filterFields,
  question: str,
  k: opt(int),
  budget: opt(int),
  pack: opt(bool),
});

export const HistoryIn = object("HistoryIn", {
  query: opt(nullable(str)),
  record_id: opt(nullable(int)),
  as_of: opt(nullable(str)),
  limit: opt(int),
});

export const ChangesIn = object("ChangesIn", {
  since: str,
  until: str,
  query: opt(nullable(str)),
  known_since: opt(nullable(str)),
  known_until: opt(nullable(str)),
  limit: opt(int),
});

export const CorrectionIn = object("CorrectionIn", { reason: str });
export const SupersedeIn = object("SupersedeIn", { reason: str, by: int });

// -- responses --------------------------------------------------------------------------------

export const AddOut = object("AddOut", {
  id: nullable(int),
  skipped: nullable(lit("duplicate", "empty")),
  duplicate_of: opt(nullable(int)),
});

export const AddManyOut = object("AddManyOut", { results: array(AddOut) });

const recordFields = {
  id: int,
  text: str,
  author: nullable(str),
  date: nullable(str),
  datetime: nullable(str),
  tags: array(str),
  source: nullable(str),
  scope: str,
  ingested_at: str,
  state: lit("active", "archived", "redacted"),
  superseded_by: nullable(int),
  thread: nullable(str),
  metadata: nullable(json),
} as const;

export const RecordOut = object("RecordOut", recordFields);
export const RecordList = array(RecordOut);

export const HitOut = object("HitOut", {
  ...recordFields,
  rank: int,
  score: num,
  legs: array(str),
  leg_ranks: map(int),
  reserved: bool,
});
export const SearchOut = object("SearchOut", { hits: array(HitOut) });

export const EvidenceRowOut = object("EvidenceRowOut", {
  id: int,
  offset: int,
  length: int,
  truncated: bool,
  excerpt: bool,
  shown: nullable(int),
});
export const EvidenceOut = object("EvidenceOut", { text: str, rows: array(EvidenceRowOut) });

export const AnswerOut = object("AnswerOut", {
  answer: str,
  citations: array(int),
  evidence: array(int),
});

export const HistoryEntryOut = object("HistoryEntryOut", {
  ...recordFields,
  reasons: array(str),
  superseded_by_record: nullable(RecordOut),
});
export const HistoryOut = object("HistoryOut", { entries: array(HistoryEntryOut) });

export const CorrectionOut = object("CorrectionOut", {
  run_id: int,
  operation: lit("supersede", "archive", "redact"),
  record_ids: array(int),
  by: nullable(int),
  reason: str,
  actor: nullable(str),
  at: str,
});
export const CorrectionsOut = object("CorrectionsOut", { corrections: array(CorrectionOut) });

export const ChangesOut = object("ChangesOut", {
  since: str,
  until: str,
  entered: array(RecordOut),
  superseded: array(RecordOut),
  archived: array(CorrectionOut),
  redacted: array(CorrectionOut),
});

export const UndoOut = object("UndoOut", {
  run_id: int,
  undo_run_id: int,
  restored: int,
  archived_merged: int,
  restored_ids: array(int),
  archived_merged_ids: array(int),
});

export const EncoderOut = object("EncoderOut", { name: str, dim: int });
export const InfoOut = object("InfoOut", {
  scope: str,
  records: int,
  active: int,
  archived: int,
  encoder: nullable(EncoderOut),
  schema_version: int,
  role: lit("read", "write", "admin"),
});

export const IngestOut = object("IngestOut", {
  added: int,
  skipped: int,
  skipped_by_reason: map(int),
  failed: int,
  failures: array(object("IngestFailure", { line: int, reason: str })),
  ids: array(int),
});

/** An RFC 9457 problem document: every error the API answers. */
export const Problem = object("Problem", {
  type: str,
  title: str,
  status: int,
  detail: str,
  field: opt(nullable(str)),
  errors: opt(nullable(array(map(str)))),
});

/**
 * One line of GET /v1/export. The OpenAPI document declares that body only as a string (JSON
 * Lines), so these fields cannot be checked against it; tests read a real export instead.
 */
export const ExportLine = object("ExportLine", {
  id: int,
  text: str,
  author: nullable(str),
  date: nullable(str),
  tags: array(str),
  source: nullable(str),
  thread: nullable(str),
  metadata: nullable(json),
  scope: str,
  ingested_at: str,
  state: lit("active", "archived", "redacted"),
  superseded_by: nullable(int),
});

// -- the types --------------------------------------------------------------------------------

export type DocumentInput = Infer<typeof DocumentIn>;
export type SearchRequest = Infer<typeof SearchIn>;
export type PackOptions = Infer<typeof PackIn>;
export type EvidenceRequest = Infer<typeof EvidenceIn>;
export type AskRequest = Infer<typeof AskIn>;
export type HistoryRequest = Infer<typeof HistoryIn>;
export type ChangesRequest = Infer<typeof ChangesIn>;
export type AddResult = Infer<typeof AddOut>;
export type MemoryRecord = Infer<typeof RecordOut>;
export type Hit = Infer<typeof HitOut>;
export type EvidenceRow = Infer<typeof EvidenceRowOut>;
export type EvidenceBlock = Infer<typeof EvidenceOut>;
export type Answer = Infer<typeof AnswerOut>;
export type HistoryEntry = Infer<typeof HistoryEntryOut>;
export type Correction = Infer<typeof CorrectionOut>;
export type Changes = Infer<typeof ChangesOut>;
export type UndoResult = Infer<typeof UndoOut>;
export type Info = Infer<typeof InfoOut>;
export type IngestResult = Infer<typeof IngestOut>;
export type ProblemDocument = Infer<typeof Problem>;
export type ExportedRecord = Infer<typeof ExportLine>;

// -- routes -----------------------------------------------------------------------------------

export interface QueryParam {
  readonly name: string;
  readonly type: Type;
}

export interface Route {
  readonly method: "GET" | "POST";
  /** The OpenAPI path template, e.g. /v1/records/{record_id}. */
  readonly path: string;
  readonly body?: ObjectType;
  /** A body that is not JSON: its media type (the export's and the upload's JSON Lines). */
  readonly bodyMedia?: string;
  readonly response?: Type;
  readonly responseMedia?: string;
  readonly query?: readonly QueryParam[];
  readonly pathParams?: readonly string[];
  /** Error statuses the client maps to a class for this route (checked as documented). */
  readonly errors: readonly number[];
}

export const JSONL = "application/x-ndjson";
const COMMON = [401, 403, 422, 503] as const;

/** Every route the client calls, by the method that calls it. */
export const ROUTES = {
  add: { method: "POST", path: "/v1/records", body: DocumentIn, response: AddOut, errors: COMMON },
  addMany: {
    method: "POST",
    path: "/v1/records/batch",
    body: DocumentsIn,
    response: AddManyOut,
    errors: COMMON,
  },
  get: {
    method: "GET",
    path: "/v1/records/{record_id}",
    pathParams: ["record_id"],
    response: RecordOut,
    errors: [...COMMON, 404],
  },
  getMany: {
    method: "GET",
    path: "/v1/records",
    query: [{ name: "id", type: array(int) }],
    response: RecordList,
    errors: [...COMMON, 404],
  },
  search: { method: "POST", path: "/v1/search", body: SearchIn, response: SearchOut, errors: COMMON },
  evidence: {
    method: "POST",
    path: "/v1/evidence",
    body: EvidenceIn,
    response: EvidenceOut,
    errors: COMMON,
  },
  ask: { method: "POST", path: "/v1/ask", body: AskIn, response: AnswerOut, errors: COMMON },
  history: {
    method: "POST",
    path: "/v1/history",
    body: HistoryIn,
    response: HistoryOut,
    errors: [...COMMON, 404],
  },
  changes: {
    method: "POST",
    path: "/v1/changes",
    body: ChangesIn,
    response: ChangesOut,
    errors: COMMON,
  },
  corrections: { method: "GET", path: "/v1/corrections", response: CorrectionsOut, errors: COMMON },
  supersede: {
    method: "POST",
    path: "/v1/records/{record_id}/supersede",
    pathParams: ["record_id"],
    body: SupersedeIn,
    response: CorrectionOut,
    errors: [...COMMON, 404, 409],
  },
  archive: {
    method: "POST",
    path: "/v1/records/{record_id}/archive",
    pathParams: ["record_id"],
    body: CorrectionIn,
    response: CorrectionOut,
    errors: [...COMMON, 404, 409],
  },
  redact: {
    method: "POST",
    path: "/v1/records/{record_id}/redact",
    pathParams: ["record_id"],
    body: CorrectionIn,
    response: CorrectionOut,
    errors: [...COMMON, 404, 409],
  },
  undo: {
    method: "POST",
    path: "/v1/runs/{run_id}/undo",
    pathParams: ["run_id"],
    response: UndoOut,
    errors: [...COMMON, 404, 409],
  },
  info: { method: "GET", path: "/v1/info", response: InfoOut, errors: COMMON },
  export: {
    method: "GET",
    path: "/v1/export",
    query: [{ name: "active_only", type: bool }],
    responseMedia: JSONL,
    errors: COMMON,
  },
  ingest: {
    method: "POST",
    path: "/v1/ingest",
    bodyMedia: JSONL,
    response: IngestOut,
    errors: COMMON,
  },
} as const satisfies Record<string, Route>;
