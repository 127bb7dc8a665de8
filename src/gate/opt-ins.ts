/**
 * The gate's loud opt-ins, from its own config and the route table in use: every setting whose non-default value
 * leaves a mixed or unverified route, a cross-tenant cache share or a forged route possible. The defaults are the safe
 * values; each one set is a warning at start (the table's on every reload too), a `/status` `optIns` entry and a
 * `kvgate_gate_opt_in{setting}` series, so an operator sees them all in one place. test/safe-defaults.test.ts holds the
 * full table of settings.
 */
import { Gauge, type Registry } from 'prom-client';
import type { CompiledRouteTable } from '../policy/compile.js';
import type { GateConfig } from './config.js';

/** The gate config's opt-ins, e.g. `insecure: true`; fixed for the process's life. */
export function gateConfigOptIns(config: Pick<GateConfig, 'insecure' | 'keys' | 'workerView'>): string[] {
  const out: string[] = [];
  if (config.insecure) out.push('insecure: true');
  if (config.keys.devSeed !== undefined) out.push('keys.devSeed');
  if (config.workerView.mode === 'static') out.push('workerView.mode: static');
  return out;
}

/** The route table's opt-ins, each naming where it is written, e.g. `revisions.llama-b.trust: declared-only`. */
export function tableOptIns(table: CompiledRouteTable): string[] {
  const out: string[] = [];
  for (const r of table.revisions.values()) if (r.trust === 'declared-only') out.push(`revisions.${r.name}.trust: declared-only`);
  for (const p of table.pools.values()) {
    if (p.endpoints.some((e) => e.unverified === true)) out.push(`pools.${p.name}.endpoints[].unverified: true`);
  }
  if (table.connectorMode === 'lenient') out.push('connectorMode: lenient');
  if (table.tenancy.prefixScope === 'shared') out.push('tenancy.prefixScope: shared');
  if (table.media.allowedOrigins.length > 0) out.push('media.allowedOrigins');
  return out;
}

/** `kvgate_gate_opt_in{setting}` = 1 for each opt-in in use; `set` replaces the series when the table changes. */
export function optInGauge(registry: Registry): { set(settings: readonly string[]): void } {
  const gauge = new Gauge({
    name: 'kvgate_gate_opt_in',
    help: 'One series (value 1) per loud opt-in in use (insecure: true, keys.devSeed, workerView.mode: static, trust: declared-only, unverified endpoints, connectorMode: lenient, prefixScope: shared, media.allowedOrigins); none with the safe defaults.',
    labelNames: ['setting'] as const,
    registers: [registry],
  });
  return {
    set(settings) {
      gauge.reset();
      for (const s of settings) gauge.set({ setting: s }, 1);
    },
  };
}
