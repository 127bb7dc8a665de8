/**
 * The PrometheusRule in deploy/kubernetes/monitoring.yaml alerts on what the gate and sidecars really export: every
 * expression parses with the Prometheus project's PromQL grammar, selects only metrics the two processes register
 * (histogram samples by their `_bucket`/`_sum`/`_count` names), matches only labels those metrics carry, compares
 * them only with values the code emits, and links a runbook heading of docs/operator-guide.md. The catalogue is built
 * as the processes build it: each metrics module registered on its own registry.
 * test/deploy/alerts-fire.test.ts drives six of the alerts end to end.
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { type Metric, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { createInFlightTracker } from '../../src/decide/worker-view.js';
import { createDiscovery } from '../../src/discovery/discovery.js';
import { ERROR_STATUS } from '../../src/errors.js';
import { createGateMetrics } from '../../src/gate/metrics.js';
import { optInGauge } from '../../src/gate/opt-ins.js';
import { createPolicyStore } from '../../src/gate/policy-store.js';
import { createRolloutMetrics } from '../../src/gate/rollout-metrics.js';
import { routedOutcome } from '../../src/gate/routed-outcome.js';
import { queueTableValue } from '../../src/gate/testing.js';
import { createWorkerPoller, ENDPOINT_STATES } from '../../src/gate/worker-poller.js';
import { createKeyStore } from '../../src/key-store.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { tableFromValue } from '../../src/policy/testing.js';
import { registerProcessMetrics } from '../../src/process-metrics.js';
import { createSidecarMetrics } from '../../src/sidecar/metrics.js';
import { shippedAlerts } from '../support/alert-rules.js';
import { readPromql } from '../support/promql.js';

const SEVERITIES = ['critical', 'warning', 'info'];
const silent = pino({ level: 'silent' });

/** Every metric family the gate registers (gate.ts composes these), and every one a sidecar registers (server.ts). */
async function catalogue(): Promise<{ gate: Metric[]; sidecar: Metric[] }> {
  const gate = new Registry();
  registerProcessMetrics(gate);
  createGateMetrics(gate);
  createRolloutMetrics(gate);
  optInGauge(gate);
  const ring = createDevKeyRing('alerts');
  createKeyStore({ source: undefined, initial: ring, logger: silent, registry: gate, metricPrefix: 'kvgate_' });
  const table = tableFromValue(queueTableValue());
  createWorkerPoller(
    { intervalMs: 1000, timeoutMs: 500, staleAfterMs: 5000 },
    { inFlight: createInFlightTracker(), logger: silent, registry: gate, keys: () => ring, table: () => table },
  );
  const policy = await createPolicyStore({
    file: path.join(PACKAGE_ROOT, 'examples', 'route-tables', 'two-revisions.yaml'),
    logger: silent,
    registry: gate,
  });
  expect(policy.ok).toBe(true);
  createDiscovery({ kubeConfig: new KubeConfig(), staleAfterMs: 30_000, logger: silent, registry: gate });
  const sidecar = new Registry();
  registerProcessMetrics(sidecar);
  createSidecarMetrics(sidecar);
  createKeyStore({ source: undefined, initial: ring, logger: silent, registry: sidecar, metricPrefix: 'kvgate_sidecar_' });
  // The registered metric objects themselves (prom-client types them as MetricObject): their names and labelNames.
  return { gate: gate.getMetricsAsArray() as unknown as Metric[], sidecar: sidecar.getMetricsAsArray() as unknown as Metric[] };
}

/** Sample names a family exposes, each with its labels: a histogram's `_bucket` (plus `le`), `_sum` and `_count`. */
function sampleNames(metrics: Metric[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const m of metrics) {
    const { name, labelNames = [], type } = m as unknown as { name: string; labelNames?: string[]; type: string };
    if (type === 'histogram') {
      out.set(`${name}_bucket`, [...labelNames, 'le']);
      out.set(`${name}_sum`, [...labelNames]);
      out.set(`${name}_count`, [...labelNames]);
    } else out.set(name, [...labelNames]);
  }
  return out;
}

/**
 * The values the code emits for each label an alert compares with a fixed value: read from the code where it exports
 * them (constants, a classifier, counters it starts at 0), else listed with the file that counts them, which must
 * contain each value as a literal.
 */
async function emittedValues(registries: { gate: Metric[]; sidecar: Metric[] }): Promise<Map<string, string[]>> {
  const zeroed = async (metrics: Metric[], name: string) =>
    (await metrics.find((m) => (m as unknown as { name: string }).name === name)!.get()).values.map((v) => String(v.labels['result']));
  const literal = async (file: string, values: string[]) => {
    const source = await readFile(path.join(PACKAGE_ROOT, file), 'utf8');
    for (const v of values) expect(source, `${file} counts '${v}'`).toContain(`'${v}'`);
    return values;
  };
  return new Map<string, string[]>([
    ['kvgate_worker_status_polls_total/result', await zeroed(registries.gate, 'kvgate_worker_status_polls_total')],
    ['kvgate_keys_reloads_total/result', await zeroed(registries.gate, 'kvgate_keys_reloads_total')],
    ['kvgate_sidecar_keys_reloads_total/result', await zeroed(registries.sidecar, 'kvgate_sidecar_keys_reloads_total')],
    ['kvgate_worker_endpoints/state', [...ENDPOINT_STATES]],
    ['kvgate_decisions_total/code', Object.keys(ERROR_STATUS)],
    ['kvgate_decisions_total/outcome', await literal('src/decide/types.ts', ['route', 'hop', 'refuse', 'answer'])],
    [
      'kvgate_routed_responses_total/outcome',
      [routedOutcome('200', undefined), routedOutcome('403', 'contract_invalid'), routedOutcome('502', undefined)].map((o) => o.outcome),
    ],
    ['kvgate_policy_reloads_total/result', await literal('src/gate/policy-store.ts', ['applied', 'unchanged', 'rejected'])],
    [
      'kvgate_sidecar_silent_recomputes_total/result',
      await literal('src/sidecar/silent-recompute.ts', ['refused', 'served', 'unattributed', 'unverified']),
    ],
    ['kvgate_sidecar_worker_restarts_total/result', await literal('src/sidecar/launch-check.ts', ['reverified', 'refused'])],
    ['kvgate_sidecar_contract_failures_total/reason', await literal('src/contract/token.ts', ['unknown_key'])],
  ]);
}

/** Labels a scrape adds to every series: the monitors' target labels and the sidecar pod labels they copy. */
const TARGET_LABELS = [
  'namespace',
  'pod',
  'instance',
  'job',
  'service',
  'endpoint',
  'container',
  'kvgate_io_pool',
  'kvgate_io_role',
  'kvgate_io_revision',
];

/** The literal values an equality or a plain alternation (`a|b|c`) matcher compares with; undefined for a real regex. */
function literalValues(op: string, value: string): string[] | undefined {
  if (op === '=' || op === '!=') return [value];
  return /^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$/.test(value) ? value.split('|') : undefined;
}

describe('the PrometheusRule in monitoring.yaml', () => {
  it('every rule has an alert name, expr, for, a severity from the fixed set, a summary, a description and a runbook_url', async () => {
    const alerts = await shippedAlerts();
    expect(alerts.length).toBeGreaterThanOrEqual(15);
    expect(new Set(alerts.map((a) => a.alert)).size).toBe(alerts.length);
    for (const a of alerts) {
      expect(a.alert).toMatch(/^Kvgate[A-Za-z]+$/);
      expect(a.for, a.alert).toMatch(/^\d+[smh]$/);
      expect(SEVERITIES, a.alert).toContain(a.labels['severity']);
      expect(Object.keys(a.annotations).sort(), a.alert).toEqual(['description', 'runbook_url', 'summary']);
    }
  });

  it('every expr parses with the Prometheus PromQL grammar (which refuses a broken one)', async () => {
    expect(readPromql('sum by (pool) (kvgate_worker_endpoints{state="routable"} == 0').errors).not.toEqual([]);
    expect(readPromql('kvgate_worker_endpoints{state="routable"} === 0').errors).not.toEqual([]);
    for (const a of await shippedAlerts())
      expect({ alert: a.alert, errors: readPromql(a.expr).errors }).toEqual({ alert: a.alert, errors: [] });
  });

  it('selects only metrics the gate or a sidecar registers, with labels they carry and values the code emits', async () => {
    const registries = await catalogue();
    const names = new Map([...sampleNames(registries.gate), ...sampleNames(registries.sidecar)]);
    expect(names.get('kvgate_sidecar_prefill_leg_seconds_bucket')).toEqual(['outcome', 'le']); // histograms by sample name
    const values = await emittedValues(registries);
    const problems: string[] = [];
    for (const a of await shippedAlerts()) {
      const read = readPromql(a.expr);
      const selected = new Set<string>();
      for (const s of read.selectors) {
        const labels = names.get(s.metric);
        if (labels === undefined) {
          problems.push(`${a.alert}: ${s.metric} is registered by neither the gate nor a sidecar`);
          continue;
        }
        labels.forEach((l) => selected.add(l));
        for (const m of s.matchers) {
          if (!labels.includes(m.label)) problems.push(`${a.alert}: ${s.metric} has no label ${m.label} (it has ${labels.join(', ')})`);
          const compared = literalValues(m.op, m.value);
          const known = values.get(`${s.metric}/${m.label}`);
          if (compared === undefined) problems.push(`${a.alert}: ${s.metric}{${m.label}${m.op}"${m.value}"} is not a list of values`);
          else if (known === undefined) problems.push(`${a.alert}: no known values for ${s.metric}{${m.label}}; add them to emittedValues`);
          else
            for (const v of compared)
              if (!known.includes(v)) problems.push(`${a.alert}: ${s.metric}{${m.label}} is never "${v}" (${known.join(', ')})`);
        }
      }
      for (const l of read.groupingLabels)
        if (!selected.has(l) && !TARGET_LABELS.includes(l)) problems.push(`${a.alert}: groups by ${l}, a label of none of its metrics`);
    }
    expect(problems).toEqual([]);
  });

  it('the counters alerted on by result start every watched result at 0, so increase() sees the first one', async () => {
    const registries = await catalogue();
    const all = [...registries.gate, ...registries.sidecar];
    const startsAtZero = ['kvgate_worker_status_polls_total', 'kvgate_keys_reloads_total', 'kvgate_sidecar_keys_reloads_total'];
    startsAtZero.push('kvgate_policy_reloads_total', 'kvgate_sidecar_silent_recomputes_total');
    let watched = 0;
    for (const a of await shippedAlerts())
      for (const s of readPromql(a.expr).selectors.filter((x) => startsAtZero.includes(x.metric)))
        for (const m of s.matchers.filter((x) => x.label === 'result')) {
          const fresh = await all.find((x) => (x as unknown as { name: string }).name === s.metric)!.get();
          for (const v of literalValues(m.op, m.value) ?? []) {
            watched++;
            expect(fresh.values.find((x) => x.labels['result'] === v)?.value, `${a.alert}: ${s.metric}{result="${v}"}`).toBe(0);
          }
        }
    expect(watched).toBeGreaterThanOrEqual(10);
  });

  it("every runbook_url is a heading of docs/operator-guide.md's alerts section, one per alert", async () => {
    const guide = await readFile(path.join(PACKAGE_ROOT, 'docs', 'operator-guide.md'), 'utf8');
    // GitHub's heading anchors: lower case, punctuation other than - and _ dropped, spaces to dashes.
    const anchors = [...guide.matchAll(/^#+ (.+)$/gm)].map((m) =>
      m[1]!
        .toLowerCase()
        .replace(/[^\w\- ]/g, '')
        .replace(/ /g, '-'),
    );
    const alertsSection = guide.slice(guide.indexOf('\n## 15. Alerts'));
    for (const a of await shippedAlerts()) {
      const [file, anchor] = a.annotations['runbook_url']!.split('#');
      expect(file, a.alert).toBe('docs/operator-guide.md');
      expect(anchors, a.alert).toContain(anchor);
      expect(alertsSection, a.alert).toMatch(
        new RegExp(`^### ${a.alert.replace(/^KvgateSidecarKeyReloadRejected$/, 'KvgateKeyReloadRejected')}$`, 'm'),
      );
    }
  });

  it('covers every metric the operator guide and the metric help texts say to alert on', async () => {
    const used = new Set((await shippedAlerts()).flatMap((a) => readPromql(a.expr).selectors.map((s) => s.metric)));
    for (const metric of [
      'kvgate_gate_opt_in',
      'kvgate_gate_insecure_transport',
      'kvgate_sidecar_opt_in',
      'kvgate_worker_status_polls_total',
      'kvgate_worker_endpoints',
      'kvgate_decisions_total',
      'kvgate_routed_responses_total',
      'kvgate_sidecar_verified',
      'kvgate_keys_reloads_total',
      'kvgate_sidecar_keys_reloads_total',
      'kvgate_keys_loaded',
      'kvgate_sidecar_keys_loaded',
      'kvgate_policy_reloads_total',
      'kvgate_sidecar_silent_recomputes_total',
      'kvgate_worker_view_age_seconds',
      'kvgate_sidecar_draining',
      'kvgate_sidecar_replay_guard_evictions_total',
      'kvgate_sidecar_attestation_failures_total',
      'kvgate_forged_headers_total',
      'kvgate_discovery_watches_broken',
    ])
      expect(used, metric).toContain(metric);
  });
});

/** The metric tables of docs/operator-guide.md section 5, per process: metric name -> the label names its row lists. */
function documentedMetrics(): { gate: Map<string, string[]>; sidecar: Map<string, string[]> } {
  const guide = readFileSync(path.join(PACKAGE_ROOT, 'docs', 'operator-guide.md'), 'utf8');
  const section = guide.slice(guide.indexOf('\n## 5. Metrics'), guide.indexOf('\n## 6. '));
  const table = (from: string, to: string): Map<string, string[]> => {
    const part = section.slice(section.indexOf(`\n${from}\n`), to === '' ? undefined : section.indexOf(`\n${to}\n`));
    const rows = new Map<string, string[]>();
    for (const m of part.matchAll(/^\| `(kvgate_[a-z_]+)` \|([^|]*)\|/gm)) {
      const labels = [...m[2]!.replace(/\([^)]*\)/g, '').matchAll(/`([a-z_]+)`/g)].map((l) => l[1]!);
      rows.set(m[1]!, labels);
    }
    return rows;
  };
  return { gate: table('Gate:', 'Sidecar:'), sidecar: table('Sidecar:', '') };
}

describe("docs/operator-guide.md's metric tables (section 5)", () => {
  it('name every kvgate_ metric the gate and a sidecar register, with its labels, and nothing else', async () => {
    const registries = await catalogue();
    const registered = (metrics: Metric[]) =>
      new Map(
        metrics
          .map((m) => m as unknown as { name: string; labelNames?: string[] })
          .filter((m) => m.name.startsWith('kvgate_'))
          .map((m) => [m.name, [...(m.labelNames ?? [])].sort()] as const),
      );
    const documented = documentedMetrics();
    for (const who of ['gate', 'sidecar'] as const) {
      const docs = new Map([...documented[who]].map(([n, l]) => [n, [...l].sort()] as const));
      expect(docs.size, who).toBeGreaterThanOrEqual(10);
      expect(Object.fromEntries(docs), who).toEqual(Object.fromEntries(registered(registries[who])));
    }
  });
});
