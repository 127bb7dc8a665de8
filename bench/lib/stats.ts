/**
 * Latency summaries and plain-text tables. Percentiles are exact (sorted samples, nearest rank): benches keep
 * every sample, bounded by their request budget, so there is no histogram error to explain away.
 */

export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

/** Nearest-rank percentile of already sorted values; NaN for no samples. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function summarize(samples: ArrayLike<number>): LatencySummary {
  const sorted = Float64Array.from(samples).sort();
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1]!,
    mean: sorted.length === 0 ? Number.NaN : sum / sorted.length,
  };
}

/** Median of a few repeated measurements (robust to one noisy round). */
export function median(values: readonly number[]): number {
  return percentile(Float64Array.from(values).sort(), 50);
}

/** A number for a table cell: fixed decimals, `-` for NaN or infinity. */
export function fmt(value: number, decimals = 2): string {
  if (!Number.isFinite(value)) return '-';
  return value.toLocaleString('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
}

export function fmtInt(value: number): string {
  return Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '-';
}

export function fmtMiB(bytes: number): string {
  return Number.isFinite(bytes) ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : '-';
}

/** A verdict cell: the target and whether this run met it. Misses are printed, never hidden. */
export function verdict(ok: boolean | undefined): string {
  return ok === undefined ? 'n/a' : ok ? 'MET' : 'MISSED';
}

/** Left-aligned first column, right-aligned numbers; returns the table as text. */
export function formatTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
