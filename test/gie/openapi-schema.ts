/**
 * A structural OpenAPI v3 schema check, as kube-apiserver applies a CRD's `openAPIV3Schema` to an object
 * (k8s.io/apiextensions-apiserver pkg/apiserver/validation): type, properties (unknown fields are pruned by the API
 * server, but in a checked-in example they are always a mistake, so they are errors here), required, enum, pattern,
 * min/max length, minimum/maximum, min/max items and properties, additionalProperties. Defaults are applied first,
 * as the API server does. CEL rules (`x-kubernetes-validations`) are not evaluated here; the caller checks the ones
 * its CRD has by hand.
 */
export interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  required?: string[];
  enum?: unknown[];
  pattern?: string;
  maxLength?: number;
  minLength?: number;
  maximum?: number;
  minimum?: number;
  maxItems?: number;
  minItems?: number;
  maxProperties?: number;
  minProperties?: number;
  items?: Schema;
  default?: unknown;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
}

/** Every violation, each with its JSON path; the value is defaulted in place. */
export function validate(schema: Schema, value: unknown, path = ''): string[] {
  const out: string[] = [];
  const at = path === '' ? '<root>' : path;
  if (schema.enum !== undefined && !schema.enum.includes(value))
    out.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  switch (schema.type) {
    case 'object': {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) return [...out, `${at}: must be an object`];
      const o = value as Record<string, unknown>;
      for (const [k, s] of Object.entries(schema.properties ?? {}))
        if (o[k] === undefined && s.default !== undefined) o[k] = structuredClone(s.default);
      for (const r of schema.required ?? []) if (o[r] === undefined) out.push(`${at}: missing required field ${r}`);
      const n = Object.keys(o).length;
      if (schema.maxProperties !== undefined && n > schema.maxProperties) out.push(`${at}: more than ${schema.maxProperties} properties`);
      if (schema.minProperties !== undefined && n < schema.minProperties) out.push(`${at}: fewer than ${schema.minProperties} properties`);
      for (const [k, v] of Object.entries(o)) {
        const s = schema.properties?.[k];
        if (s !== undefined) out.push(...validate(s, v, `${path}.${k}`));
        else if (typeof schema.additionalProperties === 'object') out.push(...validate(schema.additionalProperties, v, `${path}.${k}`));
        else if (schema.properties !== undefined && schema['x-kubernetes-preserve-unknown-fields'] !== true)
          out.push(`${path}.${k}: unknown field`);
      }
      return out;
    }
    case 'array': {
      if (!Array.isArray(value)) return [...out, `${at}: must be an array`];
      if (schema.maxItems !== undefined && value.length > schema.maxItems) out.push(`${at}: more than ${schema.maxItems} items`);
      if (schema.minItems !== undefined && value.length < schema.minItems) out.push(`${at}: fewer than ${schema.minItems} items`);
      value.forEach((v, i) => schema.items && out.push(...validate(schema.items, v, `${path}[${i}]`)));
      return out;
    }
    case 'string':
      if (typeof value !== 'string') return [...out, `${at}: must be a string`];
      if (schema.maxLength !== undefined && value.length > schema.maxLength) out.push(`${at}: longer than ${schema.maxLength}`);
      if (schema.minLength !== undefined && value.length < schema.minLength) out.push(`${at}: shorter than ${schema.minLength}`);
      if (schema.pattern !== undefined && !new RegExp(schema.pattern).test(value)) out.push(`${at}: does not match ${schema.pattern}`);
      return out;
    case 'integer':
    case 'number':
      if (typeof value !== 'number' || (schema.type === 'integer' && !Number.isInteger(value)))
        return [...out, `${at}: must be ${schema.type === 'integer' ? 'an integer' : 'a number'}`];
      if (schema.maximum !== undefined && value > schema.maximum) out.push(`${at}: above ${schema.maximum}`);
      if (schema.minimum !== undefined && value < schema.minimum) out.push(`${at}: below ${schema.minimum}`);
      return out;
    case 'boolean':
      return typeof value === 'boolean' ? out : [...out, `${at}: must be a boolean`];
    default:
      return out;
  }
}
