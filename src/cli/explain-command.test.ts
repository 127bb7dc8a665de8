import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { clone, fp8DynamicDescriptorInput, twoRevisionTableValue } from '../policy/testing.js';
import { explainCommand } from './explain-command.js';

type Value = Record<string, any>;
const NOW = '1700000000000';
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvgate-explain-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

let n = 0;
async function file(content: unknown, ext = 'json'): Promise<string> {
  const p = join(dir, `f${n++}.${ext}`);
  await writeFile(p, typeof content === 'string' ? content : JSON.stringify(content));
  return p;
}
function tableValue(mutate: (v: Value) => void = () => {}): Value {
  const v = clone(twoRevisionTableValue()) as Value;
  v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight: 100 };
  v['fallback'] = [{ queue: { deadlineMs: 2000, maxDepth: 2 } }, { refuse: { retryAfterSeconds: 7 } }];
  mutate(v);
  return v;
}
const chat = { model: 'llama-3-8b', messages: [{ role: 'user', content: 'Say hello.' }] };

async function explain(args: string[], opts: { table?: Value; request?: unknown } = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const policy = await file(opts.table ?? tableValue());
  const request = await file(opts.request ?? chat);
  const code = await explainCommand(['--policy', policy, '--request', request, '--dev-keys', 'explain-test', '--now', NOW, ...args], {
    out: (t) => out.push(t),
    err: (t) => err.push(t),
  });
  return { code, out: out.join(''), err: err.join('') };
}
const json = async (args: string[], opts: { table?: Value; request?: unknown } = {}) => {
  const r = await explain([...args, '--json'], opts);
  expect(r.code, r.err).toBe(0);
  return JSON.parse(r.out) as Record<string, any>;
};
const tenant = ['--tenant', 'acme', '--session', 's-1'];
const B_BUSY = ['--worker', '10.0.4.1:9090=busy'];

describe('kvgate explain: a route', () => {
  it('prints the rollout, each step, and the headers stamped toward upstream and back to the client', async () => {
    const r = await explain(tenant);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      /^kvgate explain: request explain-request\nrollout:\n {2}llama-3-8b: stable llama-a 0%; verification not required\n {2}llama-3-8b: candidate llama-b 100%; verification not required\nsteps:\n {2}1\. request explain-request: POST \/v1\/chat\/completions\n {2}2\. tenant: acme \(from header x-tenant-id\)/,
    );
    expect(r.out).toMatch(
      /decision: route to group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b, tenant acme, scope tenant:acme\)\n {2}decode: b_decode 10\.0\.4\.1:9090 \(pool b-decode\)\n {2}prefill: b_prefill 10\.0\.3\.1:9090 \(pool b-prefill\)\n {2}body: cache_salt set to [A-Za-z0-9_-]+ \(derived from the group and tenant scope\)\n {2}headers stamped toward upstream:\n {4}x-request-id: explain-request\n {4}x-kvgate-group: g_/,
    );
    expect(r.out).toMatch(
      /headers added to the response to the client:\n {4}x-kvgate-group: g_[0-9a-f]+\n {4}x-kvgate-revision: llama-b\n {4}x-kvgate-binding: kvgate\.v1\.dev-insecure\./,
    );
  });

  it('a binding keeps its session on its revision across a weight change (stickiness)', async () => {
    const first = await json(tenant);
    const binding = first['responseHeaders']['x-kvgate-binding'];
    const moved = tableValue((v) => (v['models']['llama-3-8b']['rollout']['weight'] = 0));
    expect((await json(tenant, { table: moved }))['decision']['group']['revision']).toBe('llama-a');
    const sticky = await explain([...tenant, '--binding', binding], { table: moved });
    expect(sticky.out).toMatch(/revision: llama-b \(kept by the session's binding, issued 0 ms ago\)/);
    expect(sticky.out).toMatch(/decision: route to group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b/);
  });
});

describe('kvgate explain: every refusal code, as the client sees it', () => {
  it('400 bad_request: the body is not JSON', async () => {
    const r = await explain(tenant, { request: '{"model": ' });
    expect(r.out).toMatch(/decision: refuse\n {2}HTTP 400 bad_request\n {2}message: the request body is not valid JSON/);
    expect(r.out).toMatch(
      / {4}content-type: application\/json\n {4}x-kvgate-reject-reason: bad_request\n {4}x-request-id: explain-request\n {2}body: \{"error":\{"type":"kvgate_error","code":"bad_request","message":"the request body is not valid JSON/,
    );
  });

  it('400 kv_params_forbidden', async () => {
    const r = await json(tenant, { request: { ...chat, kv_transfer_params: { do_remote_decode: true } } });
    expect(r['refusal']).toMatchObject({
      status: 400,
      code: 'kv_params_forbidden',
      body: {
        error: {
          code: 'kv_params_forbidden',
          message:
            'kv_transfer_params is set by kvgate\'s sidecars, never by a client (found at "kv_transfer_params"); remove it from the request',
        },
      },
    });
  });

  it('401 tenant_required, 403 tenant_scope_denied, 404 unknown_model', async () => {
    expect((await json([]))['refusal']).toMatchObject({ status: 401, code: 'tenant_required' });
    expect((await json(['--tenant', 'initech']))['refusal']).toMatchObject({
      status: 403,
      code: 'tenant_scope_denied',
      message: 'tenant initech may not use model llama-3-8b; ask the gateway operator for access',
    });
    expect((await json(tenant, { request: { ...chat, model: 'gpt-5' } }))['refusal']).toMatchObject({ status: 404, code: 'unknown_model' });
  });

  it("409 mixed_revision: a prefill leg aimed outside its contract's group", async () => {
    const routed = await json(tenant);
    const contract = routed['upstreamHeaders']['x-kvgate-contract'];
    const r = await json(['--contract', contract, '--prefill-cluster', 'a_prefill', '--header', 'x-request-id=explain-request']);
    expect(r['refusal']).toMatchObject({ status: 409, code: 'mixed_revision' });
    expect(r['refusal']['message']).toMatch(
      /^prefill cluster a_prefill serves revision llama-a, another compatibility group, but request explain-request is bound to group g_/,
    );
    const ok = await json(['--contract', contract, '--header', 'x-request-id=explain-request']);
    expect(ok['kind']).toBe('hop');
  });

  it('409 incompatible_transfer: a table the gate would refuse, explained with --allow-invalid', async () => {
    const fp8 = tableValue((v) => (v['revisions']['llama-b'] = { descriptor: fp8DynamicDescriptorInput('b') }));
    const refused = await explain(tenant, { table: fp8 });
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      /the route table cannot be used:[\s\S]*error: revisions\.llama-b\.descriptor: revision "llama-b" cannot be disaggregated/,
    );
    const r = await explain([...tenant, '--allow-invalid'], { table: fp8 });
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/WARNING: the gate would refuse to load this table/);
    expect(r.out).toMatch(
      /HTTP 409 incompatible_transfer\n {2}message: model llama-3-8b \(revision llama-b\) cannot be served with disaggregated prefill\/decode: .*dynamic per-block fp8 scales/,
    );
  });

  it('413 body_too_large', async () => {
    const r = await json(tenant, {
      table: tableValue((v) => (v['limits'] = { maxBodyBytes: 64 })),
      request: { ...chat, messages: [{ role: 'user', content: 'x'.repeat(200) }] },
    });
    expect(r['refusal']).toMatchObject({ status: 413, code: 'body_too_large' });
  });

  it('429 queue_full: the queue step it would take is full', async () => {
    const r = await explain([...tenant, ...B_BUSY, '--queue-depth', '2']);
    expect(r.out).toMatch(/fallback step 1 \(queue\): the queue of group g_[0-9a-f]+ is full \(2 of maxDepth 2\)/);
    expect(r.out).toMatch(/HTTP 429 queue_full\n[\s\S]*retry-after: 7/);
  });

  it('503 no_compatible_capacity with retry-after: a drained pool frees nothing by waiting', async () => {
    const r = await json(tenant, { table: tableValue((v) => (v['pools'][3]['draining'] = true)) });
    expect(r['refusal']).toMatchObject({ status: 503, code: 'no_compatible_capacity', headers: { 'retry-after': '7' } });
    expect(r['trace']).toContain(
      'fallback step 1 (queue): passed: no decode endpoint of the group is merely at its in-flight limit, so waiting frees nothing (pool b-decode is draining)',
    );
  });

  it('504 queue_deadline_exceeded: the wait it takes, and the answer at its deadline', async () => {
    const r = await explain([...tenant, ...B_BUSY]);
    expect(r.out).toMatch(
      /decision: wait in the fifo queue of group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b\) for decode capacity \(fallback step 1\)/,
    );
    expect(r.out).toMatch(/Envoy: the gate first sends override_message_timeout 2250 ms/);
    expect(r.out).toMatch(
      /if not, at the deadline \(decided again with nothing freed\): refuse\n {4}HTTP 504 queue_deadline_exceeded\n {4}message: request waited 2000 ms for decode capacity/,
    );
    const tight = await json([...tenant, ...B_BUSY, '--header', 'x-request-deadline-ms=300', '--max-message-timeout-ms', '1000']);
    expect(tight['wait']).toMatchObject({ deadlineMs: 300, overrideMessageTimeoutMs: 550 });
  });
});

describe('kvgate explain: each fallback branch', () => {
  it('routeVia: the whole request goes through the other revision', async () => {
    const t = tableValue((v) => (v['fallback'] = [{ routeVia: { revisions: ['llama-a'] } }, { refuse: { retryAfterSeconds: 7 } }]));
    const r = await explain([...tenant, ...B_BUSY], { table: t });
    expect(r.out).toMatch(/fallback step 1 \(routeVia\): route entirely through revision llama-a instead of llama-b/);
    expect(r.out).toMatch(
      /decision: route to group g_[0-9a-f]+ \(model llama-3-8b, revision llama-a[\s\S]*decode: a_decode [\s\S]*prefill: a_prefill/,
    );
  });

  it('recompute: decode of the same group, no prefill leg', async () => {
    const t = tableValue(
      (v) =>
        (v['fallback'] = [{ recompute: { prefillMsPerToken: 1, maxPromptTokens: 2000 } }, { queue: { deadlineMs: 2000, maxDepth: 2 } }]),
    );
    const r = await explain([...tenant, '--worker', '10.0.3.1:9090=busy'], { table: t });
    expect(r.out).toMatch(
      /fallback step 1 \(recompute\): serve on decode endpoint 10\.0\.4\.1:9090 \(pool b-decode\) without a prefill leg: about 7 tokens x 1 ms = 7 ms, cheaper than the expected wait of 2000 ms/,
    );
    expect(r.out).toMatch(/revision llama-b[\s\S]*prefill: none \(served without disaggregation\)/);
  });

  it('--expected-wait-ms is refused with why: waits no longer depend on traffic history', async () => {
    const r = await explain([...tenant, '--expected-wait-ms', '500']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--expected-wait-ms is gone: the queue no longer estimates waits from traffic history/);
  });

  it('refuse: the chain ends in 503', async () => {
    const t = tableValue((v) => (v['fallback'] = [{ refuse: { retryAfterSeconds: 9 } }]));
    expect((await json([...tenant, ...B_BUSY], { table: t }))['refusal']).toMatchObject({ status: 503, headers: { 'retry-after': '9' } });
  });

  it('a drain in the middle of a session: its next request cannot move unless the table lets pinned ones', async () => {
    const binding = (await json(tenant))['responseHeaders']['x-kvgate-binding'];
    const drained = (notPinned: boolean) =>
      tableValue((v) => {
        v['pools'][3]['draining'] = true;
        v['fallback'] = [{ routeVia: { revisions: ['llama-a'], eligible: { notPinned } } }, { refuse: { retryAfterSeconds: 7 } }];
      });
    const pinned = await json([...tenant, '--binding', binding], { table: drained(true) });
    expect(pinned['refusal']).toMatchObject({ code: 'no_compatible_capacity' });
    expect(pinned['trace']).toContain(
      "fallback step 1 (routeVia): passed: the request is pinned to revision llama-b by its session's binding (eligible.notPinned)",
    );
    const moved = await json([...tenant, '--binding', binding], { table: drained(false) });
    expect(moved['decision']['group']['revision']).toBe('llama-a');
  });
});

describe('kvgate explain: usage', () => {
  it('exit 2 on missing or bad flags, naming the problem', async () => {
    const io = { out: () => {}, err: (t: string) => errs.push(t) };
    const errs: string[] = [];
    expect(await explainCommand([], io)).toBe(2);
    expect(errs.join('')).toMatch(/--policy and --request are required/);
    expect((await explain(['--worker', '10.9.9.9:1=busy'])).err).toMatch(
      /--worker 10\.9\.9\.9:1: no pool of the route table lists this endpoint/,
    );
    expect((await explain(['--queue-depth', 'many'])).code).toBe(2);
    expect((await explain(['--keys', join(dir, 'missing.json')])).code).toBe(2);
    // A request file that is not there: exit 1, in words, with what the file should hold.
    const lost: string[] = [];
    const policy = await file(tableValue());
    expect(
      await explainCommand(['--policy', policy, '--request', join(dir, 'nope.json')], { out: () => {}, err: (t) => lost.push(t) }),
    ).toBe(1);
    expect(lost.join('')).toMatch(
      /^kvgate explain: cannot read --request \S+nope\.json: no such file \(ENOENT\)\. Fix: give the file holding the JSON body/,
    );
  });

  it('a binding minted with other keys is ignored, and the trace says so', async () => {
    const other = createDevKeyRing('someone-else');
    expect(other.currentId).toBe('dev-insecure');
    const binding = (await json(tenant))['responseHeaders']['x-kvgate-binding'] as string;
    const forged = `${binding.slice(0, -4)}AAAA`;
    const r = await json([...tenant, '--binding', forged]);
    expect(r['trace'].some((l: string) => l.startsWith('binding ignored:'))).toBe(true);
  });
});
