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
  const kind = otherKind(v);
  if (kind === undefined) return undefined;
  const has = kind.keys.length === 0 ? '' : ` (it has ${kind.keys.join(', ')})`;
  return issue(file, '(file)', `this is ${kind.what}, not a route table${has}`, kind.fix, { line: 1, column: 1 });
}

/** What the file is, the keys that gave it away, and which file to give `policy check` instead. */
function otherKind(v: Record<string, unknown>): { what: string; keys: string[]; fix: string } | undefined {
  const has = (...keys: string[]) => keys.filter((k) => k in v);
  const gate = has('listen', 'admin', 'policy', 'keys', 'tls', 'workerView', 'drain');
  if ('policy' in v && gate.length >= 2) {
    const policy = typeof v['policy'] === 'string' ? v['policy'] : 'FILE';
    return {
      what: 'a gate config',
      keys: gate,
      fix: `check the route table its policy: names instead: kvgate policy check ${policy}${policy.startsWith('/') ? '' : " (relative to the gate config's folder)"}`,
    };
  }
  if ('role' in v && 'worker' in v) {
    return {
      what: 'a sidecar config',
      keys: has('role', 'worker', 'descriptor', 'prefill', 'nixlSideChannel', 'listen'),
      fix: 'kvgate sidecar --config FILE checks it at start; give policy check the route table',
    };
  }
  const descriptor = has('model', 'tokenizer', 'chatTemplate', 'architecture', 'kvCache', 'engine', 'connector');
  if ('model' in v && descriptor.length >= 3) {
    return {
      what: 'a compatibility descriptor',
      keys: descriptor,
      fix: 'name it from a route table (revisions.<name>.descriptorFile) and check that table; kvgate fingerprint --descriptor FILE checks it alone',
    };
  }
  if ('static_resources' in v || ('apiVersion' in v && 'kind' in v)) {
    return {
      what: 'static_resources' in v ? 'an Envoy bootstrap' : `a Kubernetes ${String(v['kind'])}`,
      keys: [],
      fix: 'give policy check the route table itself (deploy/kubernetes/config/route-table.yaml in the examples); Envoy configs are rendered from it with kvgate envoy render',
    };
  }
  return undefined;
}
