/**
 * Turns zod's issues into `ConfigIssue`s an author can act on: the path as they wrote it, what is wrong, a fix, and
 * "did you mean" for a mistyped key or enum value (the most common configuration error). Every config kvgate reads
 * goes through here, so they all explain themselves the same way.
 */
import type { z } from 'zod';
import { closestMatch, formatPath, issue, listOf, type PathSegment, type ConfigIssue } from './issues.js';

/** Where a path sits in the source text, when the source kept positions. */
export type Locate = (path: readonly PathSegment[], key?: boolean) => { line: number; column: number } | undefined;

/** Minimal view of zod v4's schema internals, enough to find the keys an object at a data path accepts. */
interface SchemaInternals {
  _zod: {
    def: {
      type: string;
      shape?: Record<string, unknown>;
      element?: unknown;
      valueType?: unknown;
      innerType?: unknown;
      in?: unknown;
      options?: unknown[];
    };
  };
  description?: string;
}

function internals(schema: unknown): SchemaInternals | undefined {
  const s = schema as SchemaInternals | undefined;
  return s && typeof s === 'object' && '_zod' in s ? s : undefined;
}

function unwrap(schema: unknown): SchemaInternals | undefined {
  let s = internals(schema);
  for (let i = 0; s && i < 16; i++) {
    const d = s._zod.def;
    if (d.innerType !== undefined) s = internals(d.innerType);
    else if (d.type === 'pipe' && d.in !== undefined) s = internals(d.in);
    else return s;
  }
  return s;
}

/** The schema that validates the value at `path` (record keys and array indices pass through). */
export function schemaAt(root: unknown, path: readonly PathSegment[]): SchemaInternals | undefined {
  let s = unwrap(root);
  for (const seg of path) {
    if (!s) return undefined;
    const d = s._zod.def;
    if (d.type === 'object' && typeof seg === 'string') s = unwrap(d.shape?.[seg]);
    else if (d.type === 'array') s = unwrap(d.element);
    else if (d.type === 'record') s = unwrap(d.valueType);
    else return undefined;
  }
  return s;
}

function knownKeys(root: unknown, path: readonly PathSegment[]): string[] {
  const s = schemaAt(root, path);
  return s?._zod.def.type === 'object' ? Object.keys(s._zod.def.shape ?? {}) : [];
}

/**
 * Where else in the schema `key` is accepted (object fields only, at most 6 levels down, not at `here`): its `parent`
 * and the key's path `shown` as an author reads them (`workerView.intervalMs`, `pools[].tenants`,
 * `revisions.<name>.trust`), and `concrete` as a data path when no list or map lies on the way.
 */
function placesOf(
  root: unknown,
  key: string,
  here: readonly PathSegment[],
): { parent: string; shown: string; concrete: PathSegment[] | undefined }[] {
  const out: { parent: string; shown: string; concrete: PathSegment[] | undefined }[] = [];
  const hereShown = JSON.stringify(here);
  const walk = (schema: unknown, shown: string, concrete: PathSegment[] | undefined, depth: number): void => {
    const s = unwrap(schema);
    if (!s || depth > 6 || out.length >= 3) return;
    const d = s._zod.def;
    if (d.type === 'object') {
      const shape = d.shape ?? {};
      if (key in shape && (concrete === undefined || JSON.stringify(concrete) !== hereShown)) {
        out.push({
          parent: shown === '' ? 'the top level' : shown,
          shown: `${shown === '' ? '' : `${shown}.`}${key}`,
          concrete: concrete && [...concrete, key],
        });
      }
      for (const [k, v] of Object.entries(shape)) walk(v, shown === '' ? k : `${shown}.${k}`, concrete && [...concrete, k], depth + 1);
    } else if (d.type === 'array') walk(d.element, `${shown}[]`, undefined, depth + 1);
    else if (d.type === 'record') walk(d.valueType, `${shown}.<name>`, undefined, depth + 1);
    else if (d.type === 'union') for (const o of d.options ?? []) walk(o, shown, concrete, depth + 1);
  };
  walk(root, '', [], 0);
  return out;
}

function valueAt(data: unknown, path: readonly PathSegment[]): unknown {
  let v = data;
  for (const seg of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string | number, unknown>)[seg];
  }
  return v;
}

type ZodIssue = z.core.$ZodIssue;

/** Convert every zod issue; `data` is the raw input (to suggest enum values for what was written). */
export function fromZodIssues(
  issues: readonly ZodIssue[],
  ctx: { file: string; root: unknown; data: unknown; locate?: Locate; prefix?: readonly PathSegment[] },
): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  const prefix = ctx.prefix ?? [];
  const segments = (zi: ZodIssue) => zi.path.filter((p): p is PathSegment => typeof p === 'string' || typeof p === 'number');
  // A misspelt key is reported once, as the unknown key with its "did you mean": not also as the key it meant missing.
  // Each unknown key's guess, worked out once: what it meant, and its fix below.
  const meant = new Set<string>();
  const guesses = new Map<
    ZodIssue,
    { readonly known: string[]; readonly guesses: (string | undefined)[]; readonly elsewhere: ReturnType<typeof placesOf>[] }
  >();
  for (const zi of issues) {
    if (zi.code !== 'unrecognized_keys') continue;
    const path = segments(zi);
    const known = knownKeys(ctx.root, path);
    const each = zi.keys.map((key) => closestMatch(key, known));
    for (const guess of each) if (guess !== undefined) meant.add(JSON.stringify([...path, guess]));
    // A key that is not a typo here may be a right key at the wrong level (`intervalMs` written beside `workerView`
    // instead of under it): where it belongs, and that place is then not also reported missing (the same mistake).
    const elsewhere = zi.keys.map((key, i) => (each[i] === undefined ? placesOf(ctx.root, key, path) : []));
    for (const places of elsewhere) for (const p of places) if (p.concrete) meant.add(JSON.stringify(p.concrete));
    guesses.set(zi, { known, guesses: each, elsewhere });
  }
  for (const zi of issues) {
    const path = segments(zi);
    if (zi.code !== 'unrecognized_keys' && valueAt(ctx.data, path) === undefined && meant.has(JSON.stringify(path))) continue;
    if (zi.code === 'unrecognized_keys') {
      const { known, guesses: each, elsewhere: places } = guesses.get(zi)!;
      for (const [i, key] of zi.keys.entries()) {
        const full = [...path, key];
        const guess = each[i];
        const elsewhere = places[i] ?? [];
        const fix = guess
          ? `did you mean "${guess}"? Rename the key (keys accepted here: ${listOf(known)})`
          : elsewhere.length > 0
            ? `${key} belongs under ${elsewhere.map((p) => p.parent).join(' or ')} (${elsewhere.map((p) => p.shown).join(', ')}), not ${path.length === 0 ? 'at the top level' : `under ${formatPath(path)}`}: move it there (keys accepted here: ${listOf(known)})`
            : `remove it; keys accepted here: ${listOf(known)}`;
        out.push(issue(ctx.file, [...prefix, ...full], `unknown key "${key}"`, fix, at(ctx.locate, full, true)));
      }
      continue;
    }
    const { message, fix } = describe(zi, path, ctx.root, valueAt(ctx.data, path));
    out.push(issue(ctx.file, [...prefix, ...path], message, fix, at(ctx.locate, path, false)));
  }
  return out;
}

function at(locate: Locate | undefined, path: readonly PathSegment[], key: boolean) {
  const pos = locate?.(path, key);
  return pos ? { line: pos.line, column: pos.column } : {};
}

function describe(zi: ZodIssue, path: readonly PathSegment[], root: unknown, value: unknown): { message: string; fix: string } {
  const last = path[path.length - 1];
  const name = typeof last === 'string' ? last : 'this value';
  switch (zi.code) {
    case 'invalid_type': {
      if (path.length === 0 && (value === undefined || value === null)) {
        return {
          message: 'the file is empty (or holds only comments)',
          fix: `write the configuration in it, a ${zi.expected === 'object' ? 'mapping' : zi.expected} at the top`,
        };
      }
      if (value === undefined) {
        const hint = schemaAt(root, path)?.description;
        return {
          message: `${name} is required (expected ${zi.expected})`,
          fix: `add ${name}: <${zi.expected}>${hint ? ` (${hint})` : ''}`,
        };
      }
      const expected = zi.expected === 'object' ? 'mapping' : zi.expected;
      return {
        message: `expected ${expected}, got ${kindOf(value)}`,
        fix: `write ${name} as ${/^[aeiou]/.test(expected) ? 'an' : 'a'} ${expected}`,
      };
    }
    case 'invalid_union': {
      // zod v4 reports a union only when no branch took the value's type (a branch that did reports its own issue),
      // so what helps is every type the key takes, not zod's "Invalid input".
      const firsts = zi.errors.map((branch) => branch[0]);
      if (!firsts.every((f) => f?.code === 'invalid_type' || f?.code === 'invalid_value'))
        return { message: zi.message, fix: `correct ${name} as the message says` };
      const alternatives = firsts.flatMap((f) => {
        if (f?.code === 'invalid_type') return [f.expected === 'object' ? 'a mapping' : `a ${f.expected}`];
        return f?.code === 'invalid_value' ? f.values.map((v) => JSON.stringify(v)) : [];
      });
      const hint = schemaAt(root, path)?.description;
      const shown = [...new Set(alternatives)].join(' or ');
      return {
        message: `expected ${shown}, got ${value === undefined ? 'nothing' : kindOf(value)}`,
        fix: `write ${name} as ${shown}${hint ? ` (${hint})` : ''}`,
      };
    }
    case 'invalid_value': {
      const allowed = zi.values.map((v) => String(v));
      if (value === undefined) return { message: `${name} is required`, fix: `add ${name}: one of ${listOf(allowed)}` };
      // `version: "1"` for `version: 1`, `"true"` for `true`: the right text in quotes is a string, not the value.
      const unquoted = zi.values.find((v) => typeof v !== typeof value && String(v) === String(value));
      if (unquoted !== undefined)
        return {
          message: `${kindOf(value)} is not allowed here: ${name} takes the ${typeof unquoted} ${String(unquoted)}`,
          fix: `write ${name}: ${String(unquoted)}${typeof value === 'string' ? ', without quotes' : ''}`,
        };
      const guess = typeof value === 'string' ? closestMatch(value, allowed) : undefined;
      const msg = zi.message.startsWith('Invalid') ? `${JSON.stringify(value)} is not allowed here` : zi.message;
      const fix = guess ? `did you mean "${guess}"?` : `use one of: ${listOf(allowed)}`;
      return { message: msg, fix };
    }
    case 'too_small':
      return { message: zi.message, fix: `use a value ${zi.inclusive === false ? 'greater than' : 'of at least'} ${String(zi.minimum)}` };
    case 'too_big':
      return { message: zi.message, fix: `use a value ${zi.inclusive === false ? 'less than' : 'of at most'} ${String(zi.maximum)}` };
    case 'custom': {
      const fix = (zi.params as { fix?: unknown } | undefined)?.fix;
      return { message: zi.message, fix: typeof fix === 'string' ? fix : `correct ${name} as the message says` };
    }
    default:
      return { message: zi.message, fix: `correct ${name} as the message says` };
  }
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  // Never the whole of what was written: a binary file read as YAML is one long string.
  const shown = JSON.stringify(v);
  return `${typeof v} ${shown.length > 80 ? `${shown.slice(0, 77)}...` : shown}`;
}
