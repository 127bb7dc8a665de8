/**
 * A file handed over as a route table that is plainly another kvgate file: the gate config (whose `policy:` names the
 * table), a sidecar config, a compatibility descriptor, an Envoy bootstrap or a Kubernetes manifest. The schema would
 * answer with a dozen "unknown key" and "is required" lines; one line that says what the file is and which file to
 * give instead helps more.
 */
import { issue, type ConfigIssue } from '../config/issues.js';

export function notARouteTable(value: unknown, file: string): ConfigIssue | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if ('revisions' in v || 'version' in v || 'models' in v || 'pools' in v) return undefined;
  const has = (...keys: string[]) => keys.filter((k) => k in v);
  const named = (keys: string[]) => `(it has ${keys.join(', ')})`;
  const at = { line: 1, column: 1 };
  const gate = has('listen', 'admin', 'policy', 'keys', 'tls', 'workerView', 'drain');
  if ('policy' in v && gate.length >= 2) {
    const policy = typeof v['policy'] === 'string' ? v['policy'] : 'FILE';
    return issue(
      file,
      '(file)',
      `this is a gate config, not a route table ${named(gate)}`,
      `check the route table its policy: names instead: kvgate policy check ${policy}${policy.startsWith('/') ? '' : " (relative to the gate config's folder)"}`,
      at,
    );
  }
  const sidecar = has('role', 'worker', 'descriptor', 'prefill', 'nixlSideChannel', 'listen');
  if ('role' in v && 'worker' in v) {
    return issue(
      file,
      '(file)',
      `this is a sidecar config, not a route table ${named(sidecar)}`,
      'kvgate sidecar --config FILE checks it at start; give policy check the route table',
      at,
    );
  }
  const descriptor = has('model', 'tokenizer', 'chatTemplate', 'architecture', 'kvCache', 'engine', 'connector');
  if ('model' in v && descriptor.length >= 3) {
    return issue(
      file,
      '(file)',
      `this is a compatibility descriptor, not a route table ${named(descriptor)}`,
      'name it from a route table (revisions.<name>.descriptorFile) and check that table; kvgate fingerprint --descriptor FILE checks it alone',
      at,
    );
  }
  if ('static_resources' in v || ('apiVersion' in v && 'kind' in v)) {
    return issue(
      file,
      '(file)',
      `this is ${'static_resources' in v ? 'an Envoy bootstrap' : `a Kubernetes ${String(v['kind'])}`}, not a route table`,
      'give policy check the route table itself (deploy/kubernetes/config/route-table.yaml in the examples); Envoy configs are rendered from it with kvgate envoy render',
      at,
    );
  }
  return undefined;
}
