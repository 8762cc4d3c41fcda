/**
 * The client checked against a server's /openapi.json: every route it calls exists with that
 * method, and every field it sends or reads exists with a compatible type, so that a change
 * of the server's wire format fails a test instead of a web agent at run time.
 *
 * Compatible means, for what the client sends, that every value the client's type allows is
 * one the server's schema accepts (and every field the server requires, the client requires);
 * for what it reads, that every value the server's schema allows is one the client's type
 * covers (and every field the client counts on, the server requires). Every field the client
 * names must exist on the server's side; fields the server adds to a response are ignored.
 */

import type { Field, ObjectType, Type } from "./schema.js";
import { JSONL, Problem, ROUTES, type Route } from "./wire.js";

type Schema = Record<string, unknown>;
type Doc = {
  paths?: Record<string, Record<string, Schema>>;
  components?: { schemas?: Record<string, Schema> };
};
type Side = "client" | "server";

const JSON_MEDIA = "application/json";
const PROBLEM_MEDIA = "application/problem+json";

/** Every disagreement between the client and `doc`, one line each (empty: they agree). */
export function checkOpenApi(doc: unknown): string[] {
  const problems: string[] = [];
  const d = doc as Doc;
  if (typeof d !== "object" || d === null || typeof d.paths !== "object") {
    return ["the document has no paths: not an OpenAPI document"];
  }
  const resolve = (schema: Schema): Schema => {
    let s = schema;
    for (let hops = 0; typeof s.$ref === "string" && hops < 32; hops++) {
      const name = s.$ref.replace("#/components/schemas/", "");
      const target = d.components?.schemas?.[name];
      if (!target) {
        problems.push(`unresolvable $ref ${s.$ref}`);
        return {};
      }
      s = target;
    }
    return s;
  };
  const toType = (schema: Schema): Type => fromSchema(schema, resolve);

  for (const [method, route] of Object.entries(ROUTES) as [string, Route][]) {
    const where = `${method}: ${route.method} ${route.path}`;
    const operation = d.paths[route.path]?.[route.method.toLowerCase()];
    if (!operation) {
      problems.push(`${where}: no such route on the server`);
      continue;
    }
    for (const name of route.pathParams ?? []) {
      const param = findParam(operation, name, "path");
      if (!param) problems.push(`${where}: no path parameter ${name}`);
      else compare(problems, `${where} path ${name}`, { kind: "integer" }, toType(param), "client");
    }
    for (const q of route.query ?? []) {
      const param = findParam(operation, q.name, "query");
      if (!param) problems.push(`${where}: no query parameter ${q.name}`);
      else compare(problems, `${where} query ${q.name}`, q.type, toType(param), "client");
    }
    const sent = new Set([...(route.pathParams ?? []), ...(route.query ?? []).map((q) => q.name)]);
    for (const param of (operation.parameters ?? []) as Schema[]) {
      if (param.required === true && !sent.has(String(param.name))) {
        problems.push(
          `${where}: the server requires the ${String(param.in)} parameter ${String(param.name)}`,
        );
      }
    }
    const content = (operation.requestBody as Schema | undefined)?.content as
      | Record<string, Schema>
      | undefined;
    if (route.body) {
      const schema = content?.[JSON_MEDIA]?.schema as Schema | undefined;
      if (!schema) problems.push(`${where}: the server takes no JSON body`);
      else compare(problems, `${where} body`, route.body, toType(schema), "client");
    } else if (route.bodyMedia) {
      if (!content?.[route.bodyMedia]) problems.push(`${where}: the server takes no ${route.bodyMedia} body`);
    } else if (content && (operation.requestBody as Schema).required === true) {
      problems.push(`${where}: the server requires a body the client does not send`);
    }
    const responses = (operation.responses ?? {}) as Record<string, Schema>;
    const ok = responses["200"]?.content as Record<string, Schema> | undefined;
    if (route.response) {
      const schema = ok?.[JSON_MEDIA]?.schema as Schema | undefined;
      if (!schema) problems.push(`${where}: no JSON 200 response`);
      else compare(problems, `${where} response`, toType(schema), route.response, "server");
    } else if (route.responseMedia && !ok?.[route.responseMedia ?? JSONL]) {
      problems.push(`${where}: no ${route.responseMedia} 200 response`);
    }
    for (const status of route.errors) {
      const schema = (responses[String(status)]?.content as Record<string, Schema> | undefined)?.[
        PROBLEM_MEDIA
      ]?.schema as Schema | undefined;
      if (!schema) problems.push(`${where}: status ${status} is not documented as a problem document`);
      else compare(problems, `${where} ${status}`, toType(schema), Problem, "server");
    }
  }
  return problems;
}

function findParam(operation: Schema, name: string, place: string): Schema | undefined {
  const params = (operation.parameters ?? []) as Schema[];
  const found = params.find((p) => p.name === name && p.in === place);
  return found?.schema as Schema | undefined;
}

/** An OpenAPI (JSON Schema) schema as a descriptor; constraints (lengths, bounds) are left out. */
function fromSchema(schema: Schema, resolve: (s: Schema) => Schema, depth = 0): Type {
  const s = resolve(schema);
  const next = (x: unknown) => fromSchema(x as Schema, resolve, depth + 1);
  if (depth > 32) return { kind: "json" };
  const alternatives = (s.anyOf ?? s.oneOf) as Schema[] | undefined;
  if (alternatives) return { kind: "union", of: alternatives.map(next) };
  if (Array.isArray(s.enum)) return { kind: "enum", values: s.enum.map(String) };
  switch (s.type) {
    case "string":
      return { kind: "string" };
    case "integer":
      return { kind: "integer" };
    case "number":
      return { kind: "number" };
    case "boolean":
      return { kind: "boolean" };
    case "null":
      return { kind: "null" };
    case "array":
      return { kind: "array", of: s.items ? next(s.items) : { kind: "json" } };
    case "object":
    case undefined: {
      const properties = s.properties as Record<string, Schema> | undefined;
      if (!properties) {
        const extra = s.additionalProperties;
        if (typeof extra === "object" && extra !== null) return { kind: "map", of: next(extra) };
        return { kind: "json" };
      }
      const required = new Set((s.required ?? []) as string[]);
      const fields: Record<string, Field> = {};
      for (const [name, property] of Object.entries(properties)) {
        fields[name] = { type: next(property), optional: !required.has(name) };
      }
      return { kind: "object", name: String(s.title ?? "object"), fields };
    }
    default:
      return { kind: "json" };
  }
}

/**
 * Whether every value of `from` is a value of `to` (problems appended, each with its path).
 * `client` says which side is the client's, whose every field must exist on the other side.
 */
function compare(problems: string[], path: string, from: Type, to: Type, client: Side): void {
  const found = fits(path, from, to, client);
  problems.push(...found);
}

function fits(path: string, from: Type, to: Type, client: Side): string[] {
  if (from.kind === "union") return from.of.flatMap((member) => fits(path, member, to, client));
  if (to.kind === "union") {
    let best: string[] | undefined;
    for (const member of to.of) {
      const found = fits(path, from, member, client);
      if (found.length === 0) return [];
      if (sameKind(from, member) && (best === undefined || found.length < best.length)) best = found;
    }
    return best ?? [`${path}: ${describe(from)} is not one of ${describe(to)}`];
  }
  if (to.kind === "json" && (from.kind === "json" || from.kind === "map" || from.kind === "object"))
    return [];
  if (from.kind === "enum" && to.kind === "string") return [];
  if (from.kind === "integer" && to.kind === "number") return [];
  if (from.kind !== to.kind) return [`${path}: ${describe(from)} where ${describe(to)} is expected`];
  switch (from.kind) {
    case "enum": {
      const allowed = new Set((to as typeof from).values);
      const extra = from.values.filter((v) => !allowed.has(v));
      return extra.length
        ? [`${path}: ${extra.map((v) => JSON.stringify(v)).join(", ")} not in ${describe(to)}`]
        : [];
    }
    case "array":
    case "map":
      return fits(`${path}[]`, from.of, (to as typeof from).of, client);
    case "object":
      return fitsObject(path, from, to as ObjectType, client);
    default:
      return [];
  }
}

function fitsObject(path: string, from: ObjectType, to: ObjectType, client: Side): string[] {
  const found: string[] = [];
  const clientSide = client === "client" ? from : to;
  const serverSide = client === "client" ? to : from;
  for (const name of Object.keys(clientSide.fields)) {
    if (!(name in serverSide.fields))
      found.push(`${path}.${name}: the server's ${serverSide.name} has no such field`);
  }
  for (const [name, target] of Object.entries(to.fields)) {
    const source = from.fields[name];
    if (!source) {
      if (!target.optional && name in serverSide.fields)
        found.push(`${path}.${name}: required but never given`);
      continue;
    }
    if (!target.optional && source.optional) {
      found.push(
        client === "client"
          ? `${path}.${name}: the server requires it, the client's type lets it be left out`
          : `${path}.${name}: the client counts on it, the server may leave it out`,
      );
    }
    found.push(...fits(`${path}.${name}`, source.type, target.type, client));
  }
  return found;
}

function sameKind(a: Type, b: Type): boolean {
  return a.kind === b.kind;
}

function describe(t: Type): string {
  switch (t.kind) {
    case "enum":
      return `enum(${t.values.join("|")})`;
    case "array":
      return `array of ${describe(t.of)}`;
    case "map":
      return `map of ${describe(t.of)}`;
    case "union":
      return t.of.map(describe).join(" | ");
    case "object":
      return `object ${t.name}`;
    default:
      return t.kind;
  }
}
