/**
 * Continuous client traffic for the rollout tests (test/e2e/rolling-update.test.ts, test/e2e/gie-rolling-update.test.ts):
 * clients with a session key that send the signed binding back, clients with a session key that do not (and start a
 * new session now and then), and clients with no session key; every request recorded with what came back.
 */
import { createServer } from 'node:http';
import { request as rawRequest } from '../../testbed/harness/index.js';

import { until } from './until.js';

export { until };

/** The namespace and the two revisions the rollout tests roll between. */
export const NS = 'serving';
export const A = 'llama-a';
export const B = 'llama-b';
/** The gate's worker view poll; a Ready pod is routable after the watch event and the next poll of its sidecar. */
export const POLL_MS = 100;
/**
 * How long a Ready pod may take to be routable (watch event + a poll, with room for a loaded machine). The Deployments
 * use it as `minReadySeconds`, as the operator guide's rollout section asks, so old capacity never goes before the
 * new is routable.
 */
export const SETTLE_MS = 400;
/**
 * How long Ready capacity must have been there before a refusal counts as a bug: the gate's pick-up time (a watch
 * event, a poll round, the sidecar's verification) plus slack for a loaded CI machine, where two suites share two
 * cores. Shorter than every phase of the rollouts, so a gate that never routes to a Ready pod still fails.
 */
export const PICKUP_MS = 2500;

/** A TCP port free on 127.0.0.1 now (the pods' shared target port). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** One client request and what came back. */
export interface Sent {
  readonly seq: number;
  readonly client: string;
  readonly session: string | null;
  /** The revision of the binding the client sent back, if any. */
  readonly boundTo: string | null;
  readonly sentAt: number;
  doneAt: number;
  status: number;
  stamp?: string | undefined;
  reject?: string | undefined;
  requestId?: string | undefined;
  binding?: string | undefined;
  body?: any;
  error?: string;
}

/** Continuous traffic to `url` (a gateway listener): the clients loop until `stop()`, each request recorded in `sent`. */
export function traffic(url: string) {
  const sent: Sent[] = [];
  let seq = 0;
  let running = true;
  const kinds = [
    { client: 'sticky-0', session: 'sticky-0', echo: true },
    { client: 'sticky-1', session: 'sticky-1', echo: true },
    { client: 'sticky-2', session: 'sticky-2', echo: true },
    { client: 'keyed-0', session: 'keyed', echo: false },
    { client: 'keyed-1', session: 'keyed', echo: false },
    { client: 'anon-0', session: null, echo: false },
    { client: 'anon-1', session: null, echo: false },
  ] as const;
  const bindings = new Map<string, { token: string; revision: string }>();
  /** One request as `client`, recorded in `sent`; `binding` is echoed back when given. */
  const one = async (
    client: string,
    session: string | null,
    binding?: { token: string; revision: string },
    extra: Record<string, string> = {},
  ) => {
    const s: Sent = { seq: ++seq, client, session, boundTo: binding?.revision ?? null, sentAt: Date.now(), doneAt: 0, status: 0 };
    sent.push(s);
    const r = await rawRequest(url, {
      path: '/v1/completions',
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-tenant-id': 'acme',
        'x-test-seq': String(s.seq),
        'x-test-sent': String(s.sentAt),
        ...(session === null ? {} : { 'x-session-id': session }),
        ...(binding === undefined ? {} : { 'x-kvgate-binding': binding.token }),
        ...extra,
      },
      body: JSON.stringify({ model: 'llama-3-8b', prompt: `hello ${s.seq}` }),
    });
    s.doneAt = Date.now();
    if ('error' in r) {
      s.error = r.error;
      return s;
    }
    s.status = r.status;
    s.stamp = r.headers['x-kvgate-revision'] as string | undefined;
    s.reject = r.headers['x-kvgate-reject-reason'] as string | undefined;
    s.binding = r.headers['x-kvgate-binding'] as string | undefined;
    try {
      s.body = JSON.parse(r.body);
    } catch {
      s.body = r.body;
    }
    s.requestId = s.body?.error?.request_id;
    return s;
  };
  const loops = kinds.map(async (k, i) => {
    let n = 0;
    while (running) {
      // Keyed clients start a new session now and then; sticky ones keep theirs for the whole rollout.
      const session = k.session === null ? null : k.echo ? k.session : `${k.session}-${i}-${Math.floor(n++ / 5)}`;
      const s = await one(k.client, session, k.echo ? bindings.get(k.client) : undefined);
      if (k.echo && s.status === 200 && s.binding !== undefined && s.stamp !== undefined)
        bindings.set(k.client, { token: s.binding, revision: s.stamp });
      await new Promise((res) => setTimeout(res, 3));
    }
  });
  return {
    sent,
    clients: kinds.map((k) => k.client),
    one,
    bindingOf: (client: string) => bindings.get(client),
    /** Requests finished so far. */
    done: () => sent.filter((s) => s.doneAt !== 0).length,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

/**
 * Waits until each sticky client (a session that sends its binding back) has had a request sent after `since`
 * refused 503 `no_compatible_capacity`: a binding pins a session to its revision, and `routeVia` does not move pinned
 * requests (docs/policy-guide.md section 5, step 6; section 7, `notPinned`).
 */
export async function untilStickyRefused(t: ReturnType<typeof traffic>, since: number): Promise<void> {
  const sticky = t.clients.filter((c) => c.startsWith('sticky'));
  await until(
    () => sticky.every((c) => t.sent.some((s) => s.client === c && s.sentAt > since && s.reject === 'no_compatible_capacity')),
    'each session bound to A refused once A is gone',
  );
}

/**
 * What is wrong with a refusal's audit trail in `logs` (the gate's JSON lines), or null: exactly one line with `audit`
 * set for its request id, with the refusal's code and a non-empty reason that starts with `reasonStarts` when given.
 */
export function auditProblem(logs: ReadonlyArray<Record<string, any>>, s: Sent, reasonStarts = ''): string | null {
  const audit = logs.filter((l) => 'audit' in l && l['request_id'] === s.requestId);
  if (s.requestId === undefined || audit.length !== 1) return `${s.status} ${s.reject} has ${audit.length} audit lines`;
  const reason = audit[0]!['reason'];
  if (audit[0]!['code'] !== s.reject || typeof reason !== 'string' || reason === '')
    return `audit line ${JSON.stringify(audit[0])} does not match ${s.reject}`;
  return reason.startsWith(reasonStarts) ? null : `audit reason does not start with "${reasonStarts}": ${reason}`;
}
