/**
 * Turning zod issues into messages a person can act on: the file, the path of the offending key, what is wrong,
 * and how to fix it. Shared by every config kvgate reads (gate config, route table, sim and sidecar configs).
 */
import type { z } from 'zod';

export interface ConfigIssue {
  readonly file: string;
  /** Dotted path with indices, e.g. `pools[2].revision`; empty for the root. */
  readonly path: string;
  readonly message: string;
  readonly fix: string;
}

export function pathOf(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? String(p) : `.${String(p)}`;
  return out;
}

/** Levenshtein distance (case-insensitive), for "did you mean" suggestions. */
export function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0]!;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j]!;
      const cost = a[i - 1]!.toLowerCase() === b[j - 1]!.toLowerCase() ? 0 : 1;
      prev[j] = Math.min(up + 1, prev[j - 1]! + 1, diag + cost);
      diag = up;
    }
  }
  return prev[b.length]!;
}

/** The closest known word, if it is close enough to be a plausible typo (`endpoinst` -> `endpoints`). */
export function didYouMean(word: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const k of known) {
    const d = editDistance(word, k);
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  const limit = Math.max(1, Math.min(3, Math.floor(word.length / 3)));
  return bestDistance <= limit ? best : undefined;
}

/** zod issues -> ConfigIssues, with a fix for each. `schemaKeys` maps a path to the keys allowed there. */
export function fromZodIssues(
  file: string,
  issues: readonly z.core.$ZodIssue[],
  knownKeysAt?: (path: readonly PropertyKey[]) => readonly string[] | undefined,
): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) {
        const suggestion = didYouMean(key, knownKeysAt?.(issue.path) ?? []);
        out.push({
          file,
          path: pathOf([...issue.path, key]),
          message: `unknown key "${key}"`,
          fix: suggestion ? `did you mean "${suggestion}"?` : 'remove it, or check the spelling against the documentation',
        });
      }
      continue;
    }
    if (issue.code === 'invalid_type' && issue.message.endsWith('received undefined')) {
      out.push({ file, path: pathOf(issue.path), message: 'missing (required)', fix: `add it (a ${issue.expected})` });
      continue;
    }
    out.push({ file, path: pathOf(issue.path), message: issue.message, fix: fixFor(issue) });
  }
  return out;
}

function fixFor(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      return `set it to a ${issue.expected}`;
    case 'invalid_value':
      return `use one of: ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'too_small':
      return `use a value >= ${String(issue.minimum)}`;
    case 'too_big':
      return `use a value <= ${String(issue.maximum)}`;
    default:
      return 'correct the value as the message says';
  }
}

export function formatIssues(issues: readonly ConfigIssue[]): string {
  return issues.map((i) => `${i.file}: ${i.path || '(root)'}: ${i.message} - fix: ${i.fix}`).join('\n');
}

/** The keys a zod object schema allows at `path` (used for "did you mean"); undefined where it cannot tell. */
export function keysAtPath(schema: z.ZodType, path: readonly PropertyKey[]): readonly string[] | undefined {
  let node: unknown = schema;
  const unwrap = (n: unknown): unknown => {
    let cur = n as { _zod?: { def?: Record<string, unknown> } };
    for (let i = 0; i < 10; i++) {
      const def = cur?._zod?.def;
      if (!def) return cur;
      if (def['innerType']) cur = def['innerType'] as typeof cur;
      else if (def['type'] === 'pipe' && def['in']) cur = def['in'] as typeof cur;
      else return cur;
    }
    return cur;
  };
  for (const p of path) {
    node = unwrap(node);
    const def = (node as { _zod?: { def?: Record<string, unknown> } })?._zod?.def;
    if (!def) return undefined;
    if (def['type'] === 'object') node = (def['shape'] as Record<string, unknown>)[String(p)];
    else if (def['type'] === 'array') node = def['element'];
    else if (def['type'] === 'record') node = def['valueType'];
    else return undefined;
  }
  node = unwrap(node);
  const def = (node as { _zod?: { def?: Record<string, unknown> } })?._zod?.def;
  return def?.['type'] === 'object' ? Object.keys(def['shape'] as object) : undefined;
}
