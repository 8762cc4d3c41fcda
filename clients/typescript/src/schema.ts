/**
 * Wire-type descriptors: one value per field the client sends or reads, from which both the
 * TypeScript types (`Infer`) and the check against the server's /openapi.json are derived,
 * so a type the compiler trusts is always a type that check has compared with the server.
 */

export type Type =
  | { readonly kind: "string" }
  | { readonly kind: "integer" }
  | { readonly kind: "number" }
  | { readonly kind: "boolean" }
  | { readonly kind: "null" }
  | { readonly kind: "json" }
  | { readonly kind: "enum"; readonly values: readonly string[] }
  | { readonly kind: "array"; readonly of: Type }
  | { readonly kind: "map"; readonly of: Type }
  | { readonly kind: "union"; readonly of: readonly Type[] }
  | ObjectType;

export interface Field {
  readonly type: Type;
  readonly optional: boolean;
}

export interface ObjectType {
  readonly kind: "object";
  /** The component's name in the server's OpenAPI document (for messages only). */
  readonly name: string;
  readonly fields: Readonly<Record<string, Field>>;
}

export const str = { kind: "string" } as const;
export const int = { kind: "integer" } as const;
export const num = { kind: "number" } as const;
export const bool = { kind: "boolean" } as const;
/** Any JSON object the server keeps as given (a record's metadata). */
export const json = { kind: "json" } as const;
const nullType = { kind: "null" } as const;

export function lit<const V extends readonly string[]>(...values: V) {
  return { kind: "enum", values } as const;
}
export function array<const T extends Type>(of: T) {
  return { kind: "array", of } as const;
}
export function map<const T extends Type>(of: T) {
  return { kind: "map", of } as const;
}
export function union<const T extends readonly Type[]>(...of: T) {
  return { kind: "union", of } as const;
}
export function nullable<const T extends Type>(of: T) {
  return { kind: "union", of: [of, nullType] } as const;
}

/** A field the sender may leave out (a request's optional field; a response's non-required). */
export function opt<const T extends Type>(type: T) {
  return { type, optional: true } as const;
}
function req<const T extends Type>(type: T) {
  return { type, optional: false } as const;
}

type FieldSpec = Type | Field;
type AsField<S> = S extends Field ? S : S extends Type ? { type: S; optional: false } : never;

export function object<const F extends Readonly<Record<string, FieldSpec>>>(name: string, spec: F) {
  const fields: Record<string, Field> = {};
  for (const [key, value] of Object.entries(spec)) {
    fields[key] = "optional" in value ? (value as Field) : req(value as Type);
  }
  return { kind: "object", name, fields } as {
    kind: "object";
    name: string;
    fields: { [K in keyof F]: AsField<F[K]> };
  };
}

type Simplify<T> = { [K in keyof T]: T[K] } & {};
type OptionalKeys<F> = { [K in keyof F]: F[K] extends { optional: true } ? K : never }[keyof F];
type FieldsOf<F> = Simplify<
  { -readonly [K in Exclude<keyof F, OptionalKeys<F>>]: F[K] extends Field ? Infer<F[K]["type"]> : never } & {
    -readonly [K in OptionalKeys<F>]?: F[K] extends Field ? Infer<F[K]["type"]> : never;
  }
>;

/** The TypeScript type of the values a descriptor describes. */
export type Infer<T> = T extends { kind: "string" }
  ? string
  : T extends { kind: "integer" | "number" }
    ? number
    : T extends { kind: "boolean" }
      ? boolean
      : T extends { kind: "null" }
        ? null
        : T extends { kind: "json" }
          ? Record<string, unknown>
          : T extends { kind: "enum"; values: readonly (infer V)[] }
            ? V
            : T extends { kind: "array"; of: infer U }
              ? Infer<U>[]
              : T extends { kind: "map"; of: infer U }
                ? Record<string, Infer<U>>
                : T extends { kind: "union"; of: readonly (infer U)[] }
                  ? Infer<U>
                  : T extends { kind: "object"; fields: infer F }
                    ? FieldsOf<F>
                    : never;
