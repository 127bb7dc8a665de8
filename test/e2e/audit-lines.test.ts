/**
 * The audit promise, proved case by case through one topology (docs/security.md section 9): every refusal any
 * component makes is exactly one log line with `audit` set, across the gate's and every sidecar's logs joined on
 * the request id, in the component that refused (a refusal passed on is not audited again); that line has a code
 * and a reason; the client's status is the code's documented one (src/errors.ts); the refusal metric of the
 * refusing component moved by exactly one, under a code from the closed set; and no log line holds the request's
 * prompt or key material. After all of them, `/metrics` of the gate and the sidecars still passes promtool.
 *
 * Refusal paths not triggered here, because nothing outside a running gate or sidecar reaches them on demand, and
 * the test that covers each one's audit line:
 * - a stream refused for its client certificate (gRPC PERMISSION_DENIED, `code: permission_denied`, counted in
 *   kvgate_ext_proc_streams_refused_total): src/gate/mtls.test.ts;
 * - a request still undecided when the gate's drain grace runs out (`code: draining`), and a gate failure while
 *   answering (`code: internal`, gRPC INTERNAL; both counted in kvgate_ext_proc_stream_errors_total):
 *   src/gate/server.test.ts ("audits each request a drain or a gate failure refuses, once");
 * - the gate's queue (429 `queue_full`, 504 `queue_deadline_exceeded`): the same decision refusal path as every gate
 *   refusal here (ExtProcSession #record); the decisions in src/gate/admission.test.ts and src/gate/wait-queue.test.ts,
 *   a queue refusal's audit line in src/gate/session.test.ts;
 * - a sidecar's 429 `queue_full`: the same admission path as `draining` and `worker_unverified` here;
 *   src/sidecar/server.test.ts;
 * - 409 `attestation_invalid` (a forged or swapped attestation): only a prefill side that lies can send one;
 *   src/sidecar/attestation-check.test.ts, audited on the path `incompatible_transfer` takes here;
 * - a refusal the decode sidecar relays from the gate's hop check: the same relay as a prefill side's refusal here
 *   (`relayed: true`, no second line); src/sidecar/decode-role.test.ts;
 * - a worker's 4xx whose message quotes the prompt (vLLM's validation errors; the simulator's never do):
 *   src/sidecar/prefill-role.test.ts, src/sidecar/decode-role.test.ts.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gateSigned } from '../../src/contract/testing.js';
import { ERROR_STATUS, isErrorCode, statusOf, type ErrorCode } from '../../src/errors.js';
import { H } from '../../src/headers.js';
import { completion, crossGroupHop, post } from '../../testbed/demo/scenarios.js';
import { DEMO_KEY_SEED, SERVED_MODEL, startTopology, type Topology } from '../../testbed/demo/topology.js';
import { TOY_PROXY_PREFILL_KV } from '../../testbed/sim/testing.js';
import { lintExposition } from '../metrics/promlint.js';
import { counter, eventually, jsonLineSink, metricsOf, topologyContractFields } from './failure-matrix-support.js';

const { lines, sink } = jsonLineSink();

/** Every prompt starts with this word and names its case: no log line may hold it. */
const MARKER = 'Osprey7f3c';
const prompt = (name: string) => `${MARKER} confidential (${name}): the merger closes on Friday.`;

let t: Topology;
beforeAll(async () => {
  t = await startTopology({
    logger: pino({ level: 'debug' }, sink),
    candidateWeight: 0,
    // One poll at start: a sidecar drained by a late case is still routed to, so its refusal comes back through Envoy.
    workerViewIntervalMs: 60_000,
    sidecarProbeIntervalMs: 60_000,
    // A drained sidecar refuses at once; a trickled body is refused after the shortest wait the config allows.
    sidecar: { drainAnnounceMs: 0, bodyTimeoutMs: 100 },
    // A small body limit, so a body over it still fits Envoy's buffer and reaches the gate.
    routeTable: { limits: { maxBodyBytes: 16_384 } },
  });
});
afterAll(() => t.close());

const gateAdmin = () => `http://127.0.0.1:${t.gate.adminPort}`;
const sidecarUrl = (role: 'prefill' | 'decode') => t.worker('llama-a', role).sidecar.url;

/** What came back: the status, the refusal body's code, and the id the component that answered logs under. */
interface Answer {
  readonly status: number;
  readonly code: unknown;
  readonly requestId: string;
}

async function answerOf(res: { status: number; json: any; headers: Headers }): Promise<Answer> {
  return { status: res.status, code: res.json?.error?.code, requestId: res.json?.error?.request_id ?? res.headers.get(H.requestId) ?? '' };
}

async function send(url: string, init: RequestInit): Promise<Answer> {
  const res = await fetch(url, init);
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: the status says it all
  }
  return answerOf({ status: res.status, json, headers: res.headers });
}

function publicRequest(body: unknown, headers: Record<string, string>, method = 'POST'): Promise<Answer> {
  return send(`${t.publicUrl}/v1/completions`, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

function contractFields(
  requestId: string,
  promptText: string,
  revision: 'llama-a' | 'llama-b' = 'llama-a',
  decodeEndpoint = t.worker(revision, 'decode').address,
): { contract: string; body: Record<string, unknown> } {
  const base = topologyContractFields(t, requestId, revision);
  const fields = { ...base, decode: { ...base.decode, endpoint: decodeEndpoint } };
  return gateSigned(t.keys, fields, { ...completion(promptText, 1), kv_transfer_params: TOY_PROXY_PREFILL_KV });
}

/** A prefill leg straight to the prefill sidecar, playing the decode sidecar's part with a gate-signed contract. */
async function directLeg(
  requestId: string,
  signed: { contract: string; body: Record<string, unknown> },
  url = sidecarUrl('prefill'),
): Promise<Answer> {
  return answerOf(await post(`${url}/v1/completions`, signed.body, { 'x-request-id': requestId, [H.contract]: signed.contract }));
}

/** Headers and part of a body, then nothing: the sidecar's body timeout answers. */
function trickle(requestId: string, signed: { contract: string; body: Record<string, unknown> }): Promise<Answer> {
  const text = JSON.stringify(signed.body);
  return new Promise((resolve, reject) => {
    const req = http.request(`${sidecarUrl('prefill')}/v1/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(text)),
        'x-request-id': requestId,
        [H.contract]: signed.contract,
      },
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        const json = JSON.parse(body);
        resolve({ status: res.statusCode ?? 0, code: json.error?.code, requestId: json.error?.request_id ?? '' });
        req.destroy();
      });
    });
    req.on('error', reject);
    req.write(text.slice(0, text.length >> 1));
  });
}

/** Where a refusal is counted: a component's `/metrics`, a counter and the labels that name the refusal. */
interface Counted {
  readonly url: () => string;
  readonly name: string;
  readonly labels: (code: string) => Record<string, string>;
}
const GATE: Counted = { url: gateAdmin, name: 'kvgate_decisions_total', labels: (code) => ({ outcome: 'refuse', code }) };
const sidecar = (role: 'prefill' | 'decode'): Counted => ({
  url: () => sidecarUrl(role),
  name: 'kvgate_sidecar_requests_total',
  labels: (code) => ({ role, outcome: 'refused', code }),
});

interface Case {
  readonly name: string;
  readonly code: ErrorCode;
  /** The component that refused, as its lines say (`component`, and `worker` for a sidecar). */
  readonly by: { component: 'gate' } | { component: 'sidecar'; worker: string };
  /** Where the refusal is counted (a relayed one is counted where it was made, and may be elsewhere too). */
  readonly counted: Counted;
  /** Routed through the gate and refused behind it: the gate records it from the response headers too. */
  readonly routed?: true;
  /** Only where HTTP has a more precise status than the code's (src/sidecar/http-io.ts sendError). */
  readonly status?: number;
  readonly trigger: (rid: string, text: string) => Promise<Answer>;
}

const acme = (rid: string) => ({ 'x-tenant-id': 'acme', 'x-session-id': 'audit', 'x-request-id': rid });

const CASES: readonly Case[] = [
  {
    name: 'no tenant',
    code: 'tenant_required',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest(completion(text, 1), { 'x-request-id': rid }),
  },
  {
    name: 'a tenant the model does not serve',
    code: 'tenant_scope_denied',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest(completion(text, 1), { ...acme(rid), 'x-tenant-id': 'initech' }),
  },
  {
    name: 'an unknown model',
    code: 'unknown_model',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest({ ...completion(text, 1), model: 'gpt-5' }, acme(rid)),
  },
  {
    name: 'kv_transfer_params from a client',
    code: 'kv_params_forbidden',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest({ ...completion(text, 1), kv_transfer_params: { do_remote_prefill: true } }, acme(rid)),
  },
  {
    name: 'a body that is not JSON',
    code: 'bad_request',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest(`{"model": "${SERVED_MODEL}", "prompt": ${text}}`, acme(rid)),
  },
  {
    name: 'a method the gate does not route',
    code: 'bad_request',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest(completion(text, 1), acme(rid), 'PUT'),
  },
  {
    name: 'a body over the route table limit',
    code: 'body_too_large',
    by: { component: 'gate' },
    counted: GATE,
    trigger: (rid, text) => publicRequest(completion(`${text} ${'padding '.repeat(4096)}`, 1), acme(rid)),
  },
  {
    name: 'a prefill leg that leaves its group (internal listener)',
    code: 'mixed_revision',
    by: { component: 'gate' },
    counted: GATE,
    trigger: async (_rid, text) => answerOf(await crossGroupHop(t, text)),
  },
  {
    name: 'the internal listener without a contract',
    code: 'contract_invalid',
    by: { component: 'gate' },
    counted: GATE,
    trigger: async (rid, text) => answerOf(await post(`${t.internalUrl}/v1/completions`, completion(text, 1), { 'x-request-id': rid })),
  },
  {
    name: 'a sidecar leg without a contract',
    code: 'contract_invalid',
    by: { component: 'sidecar', worker: 'llama-a/prefill' },
    counted: sidecar('prefill'),
    trigger: async (rid, text) =>
      answerOf(await post(`${sidecarUrl('prefill')}/v1/completions`, completion(text, 1), { 'x-request-id': rid })),
  },
  {
    name: 'a contract replayed to the worker that admitted it',
    code: 'contract_invalid',
    by: { component: 'sidecar', worker: 'llama-a/prefill' },
    counted: sidecar('prefill'),
    trigger: async (rid, text) => {
      const signed = contractFields(rid, text);
      expect((await directLeg(rid, signed)).status).toBe(200);
      return directLeg(rid, signed);
    },
  },
  {
    name: 'a contract for another decode worker',
    code: 'contract_invalid',
    by: { component: 'sidecar', worker: 'llama-a/decode' },
    counted: sidecar('decode'),
    trigger: (rid, text) => directLeg(rid, contractFields(rid, text, 'llama-a', '127.0.0.1:9'), sidecarUrl('decode')),
  },
  {
    name: 'a body that never finishes arriving',
    code: 'bad_request',
    status: 408,
    by: { component: 'sidecar', worker: 'llama-a/prefill' },
    counted: sidecar('prefill'),
    trigger: (rid, text) => trickle(rid, contractFields(rid, text)),
  },
  {
    name: 'a worker its sidecar no longer verifies (llama-b, restarted with another tokenizer)',
    code: 'worker_unverified',
    by: { component: 'sidecar', worker: 'llama-b/prefill' },
    counted: { ...sidecar('prefill'), url: () => t.worker('llama-b', 'prefill').sidecar.url },
    trigger: async (rid, text) => {
      const w = await t.restartWorker('llama-b', 'prefill', { behaveAs: { tokenizer: { revision: 'tok-changed' } } });
      expect((await w.sidecar.probe()).verified).toBe(false);
      return directLeg(rid, contractFields(rid, text, 'llama-b'), w.sidecar.url);
    },
  },
  {
    name: 'the Responses API',
    code: 'bad_request',
    by: { component: 'sidecar', worker: 'llama-a/decode' },
    counted: sidecar('decode'),
    trigger: async (rid, text) =>
      answerOf(await post(`${sidecarUrl('decode')}/v1/responses`, { model: SERVED_MODEL, input: text }, { 'x-request-id': rid })),
  },
  {
    name: "a drain sent to a sidecar's request port",
    code: 'bad_request',
    by: { component: 'sidecar', worker: 'llama-a/decode' },
    counted: sidecar('decode'),
    trigger: async (rid, text) => answerOf(await post(`${sidecarUrl('decode')}/kvgate/v1/drain`, { note: text }, { 'x-request-id': rid })),
  },
  {
    name: 'a routed request its prefill worker refuses (echo: true), relayed by the decode sidecar',
    routed: true,
    code: 'bad_request',
    by: { component: 'sidecar', worker: 'llama-a/prefill' },
    counted: sidecar('prefill'),
    trigger: (rid, text) => publicRequest({ ...completion(text, 1), echo: true }, acme(rid)),
  },
  {
    name: 'a routed request whose attestation its decode sidecar refuses (the decode worker restarted with another tokenizer)',
    routed: true,
    code: 'incompatible_transfer',
    by: { component: 'sidecar', worker: 'llama-a/decode' },
    counted: sidecar('decode'),
    trigger: async (rid, text) => {
      await t.restartWorker('llama-a', 'decode', { behaveAs: { tokenizer: { revision: 'tok-changed' } } });
      try {
        return await publicRequest(completion(text, 1), acme(rid));
      } finally {
        const w = await t.restartWorker('llama-a', 'decode', { behaveAs: {} });
        expect((await w.sidecar.probe()).verified).toBe(true);
        await t.gate.refreshWorkerView(); // routable again for the cases after this one
      }
    },
  },
  // Last: the decode sidecar stays drained.
  {
    name: 'a routed request its decode sidecar refuses (draining), recorded by the gate from the response headers',
    routed: true,
    code: 'draining',
    by: { component: 'sidecar', worker: 'llama-a/decode' },
    counted: sidecar('decode'),
    trigger: async (rid, text) => {
      void t.worker('llama-a', 'decode').sidecar.drain();
      return publicRequest(completion(text, 1), acme(rid));
    },
  },
  {
    name: 'no verified capacity left for the tenant (the drained decode side, once the gate has seen it)',
    code: 'no_compatible_capacity',
    by: { component: 'gate' },
    counted: GATE,
    trigger: async (rid, text) => {
      await t.gate.refreshWorkerView();
      return publicRequest(completion(text, 1), acme(rid));
    },
  },
];

/** Lines of one request: under the id the refusing component answered with, or the client's own id on the gate's lines. */
const linesOf = (rid: string, id: string) =>
  lines.filter((l) => (id !== '' && l['request_id'] === id) || l['client_request_id'] === rid || l['request_id'] === rid);

describe('every refusal is one audit line, where it was made', () => {
  it.each(CASES)('$name: $code', async (c) => {
    const rid = `audit-${randomUUID()}`;
    const text = prompt(c.name);
    const before = await counter(c.counted.url(), c.counted.name, c.counted.labels(c.code));
    const routedBefore = await counter(gateAdmin(), 'kvgate_routed_responses_total', { outcome: 'refused' });
    const a = await c.trigger(rid, text);
    expect([a.status, a.code]).toEqual([c.status ?? statusOf(c.code), c.code]);
    expect(a.requestId).not.toBe('');

    // The metric of the component that refused, by one, under this code.
    expect(await eventually(async () => (await counter(c.counted.url(), c.counted.name, c.counted.labels(c.code))) > before)).toBe(true);
    expect(await counter(c.counted.url(), c.counted.name, c.counted.labels(c.code))).toBe(before + 1);
    // A refusal behind a route is also what the gate records from the response headers: let that land before counting lines.
    if (c.routed)
      expect(
        await eventually(async () => (await counter(gateAdmin(), 'kvgate_routed_responses_total', { outcome: 'refused' })) > routedBefore),
      ).toBe(true);

    const mine = linesOf(rid, a.requestId);
    const audit = mine.filter((l) => 'audit' in l);
    expect(audit, JSON.stringify(mine)).toHaveLength(1);
    const line = audit[0]!;
    expect(line).toMatchObject({ ...c.by, code: c.code, request_id: a.requestId });
    expect(typeof line['reason'] === 'string' && line['reason'] !== '').toBe(true);
    expect(isErrorCode(line['code'])).toBe(true);
    if (c.routed) {
      // The gate's own record of it: counted once, noted once, and neither is an audit line.
      expect(await counter(gateAdmin(), 'kvgate_routed_responses_total', { outcome: 'refused' })).toBe(routedBefore + 1);
      expect(mine.filter((l) => l['event'] === 'upstream_refusal').map((l) => [l['component'], l['code']])).toEqual([['gate', c.code]]);
    }
    // Nothing of the prompt, on any line of any component, for this request or any other.
    expect(lines.filter((l) => JSON.stringify(l).includes(MARKER)).map((l) => `${l['component']}: ${l['msg']}`)).toEqual([]);
  });

  it('no log line holds key material or a whole token', () => {
    const text = lines.map((l) => JSON.stringify(l)).join('\n');
    for (const s of [t.keys.secret(t.keys.currentId)!, t.keys.saltSecret])
      for (const form of [s.toString('hex'), s.toString('base64'), s.toString('base64url')]) expect(text.includes(form)).toBe(false);
    expect(text.includes(DEMO_KEY_SEED)).toBe(false);
    expect(text.match(/kvgate\.v1\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}/g) ?? []).toEqual([]);
  });

  it('refusals are counted under codes from the closed set, and /metrics still passes promtool', async () => {
    const codes = new Set<string>([...Object.keys(ERROR_STATUS), '']);
    for (const url of [gateAdmin(), ...t.workers.map((w) => w.sidecar.url)]) {
      const text = await metricsOf(url);
      expect(lintExposition(text), url).toEqual([]);
      for (const m of text.matchAll(/^kvgate_(?:decisions|sidecar_requests|routed_responses)_total\{[^}]*code="([^"]*)"/gm))
        expect(codes.has(m[1]!) || /^http_(?:[45]xx|unknown)$/.test(m[1]!), m[0]).toBe(true);
    }
  });
});
