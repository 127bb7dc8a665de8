/**
 * Command-line flags every bench shares. `--quick` is a short smoke pass (CI may run it; its figures are noisy
 * by design); `--summary FILE` writes the bench's target verdicts as JSON for run-all's closing table.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';

export interface TargetResult {
  /** What is measured, e.g. "p99 kvgate / no-op at c=64". */
  readonly name: string;
  /** The target in words, e.g. "<= 1.5x". */
  readonly target: string;
  /** The measured figure in words. */
  readonly measured: string;
  /** undefined when this run could not measure it (e.g. the component does not exist yet). */
  readonly ok: boolean | undefined;
}

export interface BenchSummary {
  readonly bench: string;
  readonly quick: boolean;
  readonly targets: readonly TargetResult[];
  readonly notes: readonly string[];
}

type Options = NonNullable<ParseArgsConfig['options']>;

export const COMMON_OPTIONS = {
  quick: { type: 'boolean', default: false },
  summary: { type: 'string' },
  help: { type: 'boolean', default: false },
} as const satisfies Options;

/** Parse argv with the common flags plus a bench's own; prints `help` and exits on --help or a bad flag. */
export function parseBenchArgs<O extends Options>(argv: readonly string[], own: O, help: string) {
  try {
    const { values } = parseArgs({ args: [...argv], options: { ...COMMON_OPTIONS, ...own }, strict: true, allowPositionals: false });
    if ((values as { help?: unknown }).help === true) {
      process.stdout.write(help);
      process.exit(0);
    }
    return values;
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n\n${help}`);
    process.exit(2);
  }
}

/** A positive integer flag value, or the default; exits with a clear message on garbage. */
export function intFlag(value: unknown, name: string, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`--${name} must be an integer of at least ${min}, got ${String(value)}\n`);
    process.exit(2);
  }
  return n;
}

/** A comma-separated list of positive integers (e.g. `--concurrency 1,8,64`). */
export function intListFlag(value: unknown, name: string, fallback: readonly number[]): number[] {
  if (value === undefined) return [...fallback];
  const parts = String(value)
    .split(',')
    .map((s) => Number(s.trim()));
  if (parts.length === 0 || parts.some((n) => !Number.isInteger(n) || n <= 0)) {
    process.stderr.write(`--${name} must be a comma-separated list of positive integers, got ${String(value)}\n`);
    process.exit(2);
  }
  return parts;
}

/** One of `choices`; the first is the default. */
export function choiceFlag<T extends string>(value: unknown, name: string, choices: readonly [T, ...T[]]): T {
  if (value === undefined) return choices[0];
  if (!choices.includes(value as T)) {
    process.stderr.write(`--${name} must be one of ${choices.join(', ')}, got ${String(value)}\n`);
    process.exit(2);
  }
  return value as T;
}

export function writeSummary(file: string | undefined, summary: BenchSummary): void {
  if (file !== undefined) writeFileSync(file, `${JSON.stringify(summary, null, 2)}\n`);
}
