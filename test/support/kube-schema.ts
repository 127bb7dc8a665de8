/**
 * A manifest of a built-in Kubernetes kind, checked field by field against the Kubernetes API's own schema as
 * `kubectl apply` (strict field validation, the default since Kubernetes 1.27) checks it: an unknown field, a list
 * where an object belongs or a string where a number belongs is refused by the API server, so a manifest with one
 * does not install.
 *
 * The schema is the one `@kubernetes/client-node` (already kvgate's Kubernetes client) is generated from, the
 * Kubernetes OpenAPI spec (kubernetes-client/javascript `src/gen/models/*.ts`, `attributeTypeMap`: every field's
 * JSON name and type). Two things the generated types say less precisely than the API server:
 * - `resource.Quantity` is generated as `string`, but the API server also takes a number (`nvidia.com/gpu: 1`;
 *   kubernetes `staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go` UnmarshalJSON takes both);
 * - `required` is not in the generated types, so a missing field is not found here.
 */
import * as k8s from '@kubernetes/client-node';
import { closestMatch } from '../../src/config/issues.js';

type Attribute = { readonly baseName: string; readonly type: string };
type Model = { getAttributeTypeMap(): Attribute[] };

/** Fields typed `resource.Quantity` in the Kubernetes API (map values or scalars) that the models call `string`. */
const QUANTITY_FIELDS = new Set([
  'V1ResourceRequirements.limits',
  'V1ResourceRequirements.requests',
  'V1VolumeResourceRequirements.limits',
  'V1VolumeResourceRequirements.requests',
  'V1EmptyDirVolumeSource.sizeLimit',
  'V1ResourceQuotaSpec.hard',
  'V1LimitRangeItem.default',
  'V1LimitRangeItem.defaultRequest',
  'V1LimitRangeItem.max',
  'V1LimitRangeItem.min',
  'V1LimitRangeItem.maxLimitRequestRatio',
]);

/** The model of a built-in kind (`apps/v1` + `Deployment` -> `V1Deployment`), or undefined for kinds client-node lacks (CRDs). */
export function builtInModel(apiVersion: string, kind: string): string | undefined {
  const version = apiVersion.includes('/') ? apiVersion.slice(apiVersion.indexOf('/') + 1) : apiVersion;
  const name = `${version.charAt(0).toUpperCase()}${version.slice(1)}${kind}`;
  return modelOf(name) === undefined ? undefined : name;
}

function modelOf(type: string): Model | undefined {
  const candidate = (k8s as unknown as Record<string, unknown>)[type];
  return typeof candidate === 'function' && 'getAttributeTypeMap' in candidate ? (candidate as unknown as Model) : undefined;
}

/** Every way `value` departs from the schema of `type`, each with its path (`spec.template.spec.containers[0].readinesProbe`). */
export function schemaFindings(type: string, value: unknown, at = ''): string[] {
  const out: string[] = [];
  walk(type, value, at, false, out);
  return out;
}

function walk(type: string, value: unknown, at: string, quantity: boolean, out: string[]): void {
  if (value === null || value === undefined) return;
  const list = /^Array<(.+)>$/.exec(type);
  if (list !== null) {
    if (!Array.isArray(value)) return void out.push(`${at}: a list is expected here, not ${describe(value)}`);
    value.forEach((item, i) => walk(list[1] as string, item, `${at}[${i}]`, quantity, out));
    return;
  }
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map !== null) {
    if (!isObject(value)) return void out.push(`${at}: a mapping is expected here, not ${describe(value)}`);
    for (const [key, item] of Object.entries(value)) walk(map[1] as string, item, `${at}.${key}`, quantity, out);
    return;
  }
  switch (type) {
    case 'string':
      if (typeof value === 'string' || (quantity && typeof value === 'number')) return;
      return void out.push(`${at}: a string is expected here, not ${describe(value)} (quote it)`);
    case 'number':
      if (typeof value !== 'number') out.push(`${at}: a number is expected here, not ${describe(value)}`);
      return;
    case 'boolean':
      if (typeof value !== 'boolean') out.push(`${at}: true or false is expected here, not ${describe(value)}`);
      return;
    case 'IntOrString':
      if (typeof value !== 'number' && typeof value !== 'string')
        out.push(`${at}: a number or a string is expected here, not ${describe(value)}`);
      return;
    case 'Date':
    case 'any':
    case 'object':
      return;
  }
  const model = modelOf(type);
  if (model === undefined) return void out.push(`${at}: no schema for ${type} (a client-node upgrade renamed it?)`);
  if (!isObject(value)) return void out.push(`${at}: a mapping (${type}) is expected here, not ${describe(value)}`);
  const fields = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [key, item] of Object.entries(value)) {
    const field = fields.get(key);
    if (field === undefined) {
      const near = closestMatch(key, [...fields.keys()]);
      out.push(`${at}.${key}: unknown field of ${type}${near === undefined ? '' : ` (did you mean ${near}?)`}`);
      continue;
    }
    walk(field, item, `${at}.${key}`, QUANTITY_FIELDS.has(`${type}.${key}`), out);
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const describe = (v: unknown): string => (Array.isArray(v) ? 'a list' : isObject(v) ? 'a mapping' : `${typeof v} ${JSON.stringify(v)}`);
