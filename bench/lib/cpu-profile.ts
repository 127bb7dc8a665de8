/**
 * Reads a V8 `.cpuprofile` (written by `node --cpu-prof`) and ranks functions by self and inclusive time, so a
 * bench can say precisely what is hot instead of pasting a flame graph. Pure: profile JSON in, rows out.
 */

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: readonly number[];
}

export interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

export interface HotFunction {
  /** `name (file:line)`, file relative to the project where possible. */
  readonly fn: string;
  readonly selfMs: number;
  readonly selfPct: number;
  /** Time with this function anywhere on the stack (each sample counted once per function). */
  readonly totalMs: number;
  readonly totalPct: number;
}

function labelOf(f: CallFrame): string {
  const name = f.functionName === '' ? '(anonymous)' : f.functionName;
  if (f.url === '') return name;
  const url = f.url.replace(/^file:\/\//, '');
  const short = url.includes('/dist/')
    ? url.slice(url.lastIndexOf('/dist/') + 6)
    : url.includes('node_modules/')
      ? url.slice(url.lastIndexOf('node_modules/') + 13)
      : url;
  return `${name} (${short}:${f.lineNumber + 1})`;
}

/** Rank functions of `profile` by self time; `(idle)` is left out, `(program)` and `(garbage collector)` kept so GC shows. */
export function hotFunctions(profile: CpuProfile, top = 20): { rows: HotFunction[]; totalMs: number } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let totalUs = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    const node = byId.get(id);
    if (node === undefined) return;
    const label = labelOf(node.callFrame);
    if (label === '(idle)') return;
    totalUs += dt;
    self.set(label, (self.get(label) ?? 0) + dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const l = labelOf(byId.get(cur)!.callFrame);
      if (!seen.has(l)) {
        seen.add(l);
        total.set(l, (total.get(l) ?? 0) + dt);
      }
    }
  });
  const rows = [...total.entries()]
    .map(([fn, us]) => {
      const selfUs = self.get(fn) ?? 0;
      return { fn, selfMs: selfUs / 1000, selfPct: (100 * selfUs) / totalUs, totalMs: us / 1000, totalPct: (100 * us) / totalUs };
    })
    .sort((a, b) => b.selfMs - a.selfMs)
    .slice(0, top);
  return { rows, totalMs: totalUs / 1000 };
}

/** The `top` functions by inclusive time whose label matches `filter` (e.g. project code only). */
export function inclusiveHot(profile: CpuProfile, filter: (label: string) => boolean, top = 15): HotFunction[] {
  return hotFunctions(profile, Number.MAX_SAFE_INTEGER)
    .rows.filter((r) => filter(r.fn))
    .sort((a, b) => b.totalMs - a.totalMs)
    .slice(0, top);
}

/** Read `file` and format both rankings as text tables (self time overall; inclusive time of kvgate's own code). */
export function formatProfileSummary(profile: CpuProfile, top = 15): string {
  const { rows, totalMs } = hotFunctions(profile, top);
  const pct = (v: number) => `${v.toFixed(1)}%`;
  const selfRows = rows.map((r) => [r.fn, `${r.selfMs.toFixed(0)} ms`, pct(r.selfPct), pct(r.totalPct)]);
  const ours = inclusiveHot(profile, (l) => /\((src|bench)\//.test(l), top).map((r) => [
    r.fn,
    `${r.totalMs.toFixed(0)} ms`,
    pct(r.totalPct),
    pct(r.selfPct),
  ]);
  const table = (headers: string[], body: string[][]) => {
    const w = headers.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
    return [headers, ...body].map((cells) => cells.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join('  ')).join('\n');
  };
  return [
    `busy CPU time in profile: ${totalMs.toFixed(0)} ms`,
    'by self time:',
    table(['function', 'self', 'self %', 'incl %'], selfRows),
    '',
    "kvgate's own code by inclusive time:",
    table(['function', 'incl', 'incl %', 'self %'], ours),
  ].join('\n');
}
