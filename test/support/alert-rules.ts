/** The alerting rules deploy/kubernetes/monitoring.yaml ships, for the tests that check and fire them (test/deploy/alerts*.test.ts). */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';

export interface AlertRule {
  readonly alert: string;
  readonly expr: string;
  readonly for: string;
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
}

/** The alerting rules of monitoring.yaml's PrometheusRule, every group. */
export async function shippedAlerts(): Promise<AlertRule[]> {
  const docs = parseAllDocuments(await readFile(path.join(PACKAGE_ROOT, 'deploy', 'kubernetes', 'monitoring.yaml'), 'utf8'));
  const rules = docs.map((d) => d.toJS() as Record<string, any>).filter((o) => o?.['kind'] === 'PrometheusRule');
  if (rules.length !== 1) throw new Error(`monitoring.yaml holds ${rules.length} PrometheusRules, not 1`);
  return (rules[0]!['spec'].groups as Record<string, any>[]).flatMap((g) => g['rules'] as AlertRule[]);
}
