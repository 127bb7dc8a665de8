/**
 * `kvgate_build_info{version, component}` at 1, on the gate and on every sidecar: the Prometheus way to see which
 * kvgate release each process runs, so a rolling upgrade's skew shows across the fleet
 * (`count by (version) (kvgate_build_info)`; docs/operator-guide.md section 16), not only in `kvgate status`.
 */
import { Gauge, type Registry } from 'prom-client';
import { VERSION } from './version.js';

export function registerBuildInfo(registry: Registry, component: 'gate' | 'sidecar'): void {
  new Gauge({
    name: 'kvgate_build_info',
    help: 'Always 1: the kvgate release (version) this process runs, and which component it is (gate or sidecar).',
    labelNames: ['version', 'component'] as const,
    registers: [registry],
  }).set({ version: VERSION, component }, 1);
}
