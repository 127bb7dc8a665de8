/**
 * A strict reader for Envoy v3 YAML. Envoy itself refuses unknown fields when it loads a bootstrap; the harness
 * goes further and refuses every field it does not implement, so a test can never pass against a config the harness
 * silently ignored. Every problem is collected (not just the first) with its full YAML path.
 */
import { parseEnvoyDuration } from './duration.js';

/** The suffix every "we do not implement this" issue carries, so callers and tests can recognise it. */
export const UNSUPPORTED = 'unsupported by the kvgate harness';

/** Collects issues while a config tree is walked; readers return `undefined` for a value they refused. */
export class ConfigReader {
  readonly issues: string[] = [];

  issue(path: string, message: string): undefined {
    this.issues.push(`${path}: ${message}`);
    return undefined;
  }

  /** A required field: records "required" (plus `why`) and stands in an empty mapping when it is missing. */
  need(value: unknown, path: string, why = ''): unknown {
    if (value !== undefined) return value;
    this.issue(path, why === '' ? 'required' : `required (${why})`);
    return {};
  }

  /**
   * A mapping whose keys must all be in `known`; an unknown key is an issue at `path.key`.
   * Returns an empty object (after recording the issue) when `value` is not a mapping, so callers can keep walking.
   */
  obj(value: unknown, path: string, known: readonly string[]): Record<string, unknown> {
    if (!isPlainObject(value)) {
      this.issue(path, `expected a mapping, got ${describe(value)}`);
      return {};
    }
    for (const key of Object.keys(value)) {
      if (!known.includes(key)) this.issues.push(`${path}.${key}: ${UNSUPPORTED}`);
    }
    return value;
  }

  /** An `Any`-style mapping: `@type` must equal `typeUrl`, and the other keys must be in `known`. */
  typed(value: unknown, path: string, typeUrl: string, known: readonly string[]): Record<string, unknown> {
    const o = this.obj(value, path, ['@type', ...known]);
    const t = o['@type'];
    if (t !== typeUrl) {
      this.issue(`${path}.@type`, t === undefined ? `missing; expected "${typeUrl}"` : `"${String(t)}" ${UNSUPPORTED}`);
    }
    return o;
  }

  arr(value: unknown, path: string): unknown[] {
    if (value === undefined) return [];
    if (!Array.isArray(value)) {
      this.issue(path, `expected a list, got ${describe(value)}`);
      return [];
    }
    return value;
  }

  str(value: unknown, path: string, fallback?: string): string | undefined {
    if (value === undefined) return fallback;
    if (typeof value !== 'string') return this.issue(path, `expected a string, got ${describe(value)}`);
    return value;
  }

  requiredStr(value: unknown, path: string): string | undefined {
    if (value === undefined) return this.issue(path, 'required');
    const s = this.str(value, path);
    if (s === '') return this.issue(path, 'must not be empty');
    return s;
  }

  /** Protobuf JSON accepts a bool or a `BoolValue` written as `{ value: bool }`. */
  bool(value: unknown, path: string, fallback: boolean): boolean {
    if (value === undefined) return fallback;
    if (typeof value === 'boolean') return value;
    if (isPlainObject(value)) {
      const o = this.obj(value, path, ['value']);
      return this.bool(o['value'], `${path}.value`, false);
    }
    this.issue(path, `expected true or false, got ${describe(value)}`);
    return fallback;
  }

  /** A non-negative integer (uint32 and friends; protobuf JSON also allows them quoted). */
  uint(value: unknown, path: string, fallback: number): number {
    if (value === undefined) return fallback;
    const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
      this.issue(path, `expected a non-negative integer, got ${describe(value)}`);
      return fallback;
    }
    return n;
  }

  enumOf<T extends string>(value: unknown, path: string, allowed: readonly T[], fallback: T): T {
    if (value === undefined) return fallback;
    if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
    this.issue(path, `expected one of ${allowed.join(', ')}, got ${describe(value)}`);
    return fallback;
  }

  /** An Envoy duration ("2s", "0.200s"), in milliseconds, with an optional inclusive upper bound. */
  durationMs(value: unknown, path: string, fallback: number, maxMs?: number): number {
    if (value === undefined) return fallback;
    const parsed = parseEnvoyDuration(value);
    if (!parsed.ok) {
      this.issue(path, parsed.error);
      return fallback;
    }
    if (maxMs !== undefined && parsed.value > maxMs) {
      this.issue(path, `must be at most ${maxMs / 1000}s`);
      return fallback;
    }
    return parsed.value;
  }
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return `${typeof value} ${JSON.stringify(value)}`;
}

/** Deep-freezes a plain config tree so inner modules can share it without defensive copies. */
export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value as Record<string, unknown>)) deepFreeze(v);
  }
  return value;
}
