/** mempp's TypeScript client: `MemppClient`, its error classes and the wire types. */

export { MemppClient, type CallOptions, type ClientOptions } from "./client.js";
export type {
  AskParams,
  ChangesParams,
  DocumentFields,
  EvidenceParams,
  HistoryParams,
  SearchParams,
} from "./client.js";
export {
  Conflict,
  ConnectionFailed,
  Forbidden,
  InvalidInput,
  MemppError,
  PayloadTooLarge,
  RecordNotFound,
  Timeout,
  Unauthorized,
  Unavailable,
} from "./errors.js";
export { checkOpenApi } from "./openapi.js";
export type * from "./wire.js";
