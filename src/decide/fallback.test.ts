import { describe, expect, it } from 'vitest';
import { verifyContract } from '../contract/contract.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { clone, tableFromValue, testDescriptorInput, twoRevisionTableValue } from '../policy/testing.js';
import { decide } from './decide.js';
import type { DecideContext } from './types.js';
import { createTestQueueView, createTestWorkerView, testFacts, testKeys, type TestFactsInput } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { parseOpenAiBody } from './request-facts.js';
import type { CoreDecision, QueuedRequest, Refusal, RequestFacts, RouteDecision, WaitDecision } from './types.js';
import type { WorkerView } from './worker-view.js';

type Value = Record<string, any>;
const keys = testKeys();
const B_DECODE = '10.0.4.1:9090';
const B_PREFILL = '10.0.3.1:9090';
const QUEUE = { queue: { deadlineMs: 2000, maxDepth: 2 } };
const REFUSE = { refuse: { retryAfterSeconds: 7 } };

/** Every new session goes to llama-b (weight 100); B's endpoints take 2 requests each. */
function table(fallback: unknown[], mutate: (v: Value) => void = () => {}): CompiledRouteTable {
  const v = clone(twoRevisionTableValue()) as Value;
  v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight: 100 };
  v['pools'][2]['maxInFlightPerEndpoint'] = 2;
  v['pools'][3]['maxInFlightPerEndpoint'] = 2;
  v['fallback'] = fallback;
  mutate(v);
  return tableFromValue(v);
}
const busy = (t: CompiledRouteTable, ...addresses: string[]) =>
  createTestWorkerView(t, Object.fromEntries(addresses.map((a) => [a, { inFlight: 64 }])));
const ctx = (extra: Partial<DecideContext> = {}): DecideContext => ({
  nowMs: TEST_NOW_MS,
  keys,
  queue: createTestQueueView(),
  maxWaitMs: 29_750,
  ...extra,
});
const run = (t: CompiledRouteTable, view: WorkerView, input: TestFactsInput = {}, c = ctx()): CoreDecision =>
  decide(testFacts({ tenant: 'acme', session: 's-1', ...input }), t, view, c);

function expectKind<K extends CoreDecision['kind']>(d: CoreDecision, kind: K): Extract<CoreDecision, { kind: K }> {
  if (d.kind !== kind) throw new Error(`expected ${kind}, got ${JSON.stringify({ ...d, trace: d.trace })}`);
  return d as Extract<CoreDecision, { kind: K }>;
}
const waitOf = (d: CoreDecision): WaitDecision => expectKind(d, 'wait');
const routeOf = (d: CoreDecision): RouteDecision => expectKind(d, 'route');
const refusalOf = (d: CoreDecision): Refusal => expectKind(d, 'refuse');
const boundOf = (w: WaitDecision): QueuedRequest => ({
  group: w.group,
  pinned: w.pinned,
  enqueuedAtMs: w.enqueuedAtMs,
  deadlineAtMs: w.deadlineAtMs,
});

describe('fallback: queue', () => {
  const t = table([QUEUE, REFUSE]);

  it('waits in the bound group when an endpoint is merely busy, bounded by the step deadline', () => {
    const w = waitOf(run(t, busy(t, B_DECODE)));
    expect(w).toMatchObject({
      missing: 'decode',
      order: 'fifo',
      maxDepth: 2,
      enqueuedAtMs: TEST_NOW_MS,
      deadlineAtMs: TEST_NOW_MS + 2000,
      step: 1,
      pinned: false,
    });
    expect(w.group.revision).toBe('llama-b');
    expect(w.fallback).toEqual([{ step: 'queue', outcome: 'waiting' }]);
    expect(w.trace.at(-1)).toMatch(
      /^fallback step 1 \(queue\): wait up to 2000 ms \(the queue step's deadlineMs\) in the fifo queue of group g_[0-9a-f]+ for decode capacity; 0 ahead$/,
    );
  });

  it("a client's x-request-deadline-ms only tightens the deadline; a malformed one is ignored and traced", () => {
    const view = busy(t, B_DECODE);
    expect(waitOf(run(t, view, { headers: { 'x-request-deadline-ms': '500' } })).deadlineAtMs).toBe(TEST_NOW_MS + 500);
    expect(waitOf(run(t, view, { headers: { 'x-request-deadline-ms': '90000' } })).deadlineAtMs).toBe(TEST_NOW_MS + 2000);
    const bad = waitOf(run(t, view, { headers: { 'x-request-deadline-ms': 'soon' } }));
    expect(bad.deadlineAtMs).toBe(TEST_NOW_MS + 2000);
    expect(bad.trace).toContain('x-request-deadline-ms ignored: "soon" is not a positive whole number of milliseconds');
    // The caller's own limit (Envoy's max_message_timeout less a margin) wins over both.
    expect(waitOf(run(t, view, {}, ctx({ maxWaitMs: 750 }))).deadlineAtMs).toBe(TEST_NOW_MS + 750);
  });

  it('a full queue refuses with 429 queue_full and retry-after', () => {
    const w = waitOf(run(t, busy(t, B_DECODE)));
    const r = refusalOf(run(t, busy(t, B_DECODE), {}, ctx({ queue: createTestQueueView({ [w.group.id]: 2 }) })));
    expect(r).toMatchObject({ code: 'queue_full', retryAfterSeconds: 7, fallback: [{ step: 'queue', outcome: 'queue_full' }] });
    expect(r.message).toMatch(
      /^no decode capacity of group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b\) is free and its queue is full \(2 requests waiting, maxDepth 2\); retry after 7 s$/,
    );
  });

  it('passes when nothing is merely busy (a drained pool frees nothing by waiting), and the chain refuses', () => {
    const drained = table([QUEUE, REFUSE], (v) => (v['pools'][3]['draining'] = true));
    const r = refusalOf(run(drained, createTestWorkerView(drained)));
    expect(r).toMatchObject({ code: 'no_compatible_capacity', retryAfterSeconds: 7 });
    const why = 'no decode endpoint of the group is merely at its in-flight limit, so waiting frees nothing (pool b-decode is draining)';
    expect(r.fallback).toEqual([
      { step: 'queue', outcome: 'passed', skipped: { reason: 'nothing_to_wait_for', why } },
      { step: 'refuse', outcome: 'refused' },
    ]);
    expect(r.trace).toContain(`fallback step 1 (queue): passed: ${why}`);
    // The refusal says the queue was skipped and why, not only that capacity is missing.
    expect(r.message).toContain(`the fallback queue was skipped (nothing_to_wait_for): ${why}`);
  });

  it('passes, saying so, when no time is left to wait', () => {
    const r = refusalOf(run(t, busy(t, B_DECODE), {}, ctx({ maxWaitMs: 0 })));
    expect(r.fallback?.[0]).toEqual({
      step: 'queue',
      outcome: 'passed',
      skipped: { reason: 'no_time_left', why: "no time is left to wait (the gate's limit under Envoy's max_message_timeout)" },
    });
    expect(r.message).toContain('the fallback queue was skipped (no_time_left)');
  });

  it('a caller without a queue never gets a wait', () => {
    const r = refusalOf(run(t, busy(t, B_DECODE), {}, { nowMs: TEST_NOW_MS, keys }));
    expect(r.trace).toContain(
      "fallback step 1 (queue): passed: this caller cannot hold requests (an internal hop, or Envoy's max_message_timeout is 0)",
    );
    expect(r.fallback?.[0]?.skipped?.reason).toBe('cannot_hold');
  });

  it('edf is recorded on the wait', () => {
    const edf = table([{ queue: { deadlineMs: 2000, maxDepth: 2, order: 'edf' } }, REFUSE]);
    expect(waitOf(run(edf, busy(edf, B_DECODE))).order).toBe('edf');
  });
});

describe('fallback: a queued request decided again', () => {
  const t = table([QUEUE, REFUSE]);
  const view = busy(t, B_DECODE);
  const first = waitOf(run(t, view));
  const bound = boundOf(first);

  it('keeps waiting until its deadline, then 504 queue_deadline_exceeded', () => {
    const again = waitOf(run(t, view, {}, ctx({ nowMs: TEST_NOW_MS + 500, bound })));
    expect(again).toMatchObject({ enqueuedAtMs: TEST_NOW_MS, deadlineAtMs: TEST_NOW_MS + 2000, group: first.group });
    expect(again.trace).toContain('fallback step 1 (queue): keep waiting (waited 500 ms, 1500 ms left)');
    const late = refusalOf(run(t, view, {}, ctx({ nowMs: TEST_NOW_MS + 2000, bound })));
    expect(late).toMatchObject({ code: 'queue_deadline_exceeded', fallback: [{ step: 'queue', outcome: 'deadline_exceeded' }] });
    expect(late.message).toMatch(
      /^request waited 2000 ms for decode capacity of group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b\) and its queue deadline of 2000 ms passed: pool b-decode: endpoint 10\.0\.4\.1:9090 is at its in-flight limit of 2; retry later/,
    );
    expect(late.retryAfterSeconds).toBeUndefined();
  });

  it('is routed inside its group when capacity frees, even if the cohort now says another revision', () => {
    const weightZero = table([QUEUE, REFUSE], (v) => (v['models']['llama-3-8b']['rollout']['weight'] = 0));
    const d = routeOf(run(weightZero, createTestWorkerView(weightZero), {}, ctx({ nowMs: TEST_NOW_MS + 100, bound })));
    expect(d.group).toEqual(first.group);
    expect([d.decode.cluster, d.prefill?.cluster]).toEqual(['b_decode', 'b_prefill']);
    expect(d.trace).toContain(`revision: llama-b (kept: the request waits in the queue of group ${first.group.id})`);
  });

  it('is refused clearly, never moved, when the table no longer serves its group', () => {
    const retired = table([QUEUE, REFUSE], (v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' }));
    const r = refusalOf(run(retired, createTestWorkerView(retired), {}, ctx({ bound })));
    expect(r.code).toBe('no_compatible_capacity');
    expect(r.message).toBe(
      `request req-1 waited in the queue of group ${first.group.id} (model llama-3-8b, revision llama-b) and the route table changed: ` +
        'revision llama-b no longer serves model llama-3-8b for this tenant. A queued request is never moved to another group; retry, and the new request is bound afresh',
    );
    const redeclared = table(
      [QUEUE, REFUSE],
      (v) => (v['revisions']['llama-b'] = { descriptor: testDescriptorInput({ weights: 'b', chatTemplate: { revision: 'tmpl-2' } }) }),
    );
    expect(refusalOf(run(redeclared, createTestWorkerView(redeclared), {}, ctx({ bound }))).message).toMatch(
      /revision llama-b was redeclared with another fingerprint/,
    );
    const rescoped = table([QUEUE, REFUSE], (v) => (v['tenancy']['prefixScope'] = 'shared'));
    expect(refusalOf(run(rescoped, createTestWorkerView(rescoped), {}, ctx({ bound }))).message).toMatch(
      /the tenant prefix scope is now shared/,
    );
  });

  it('never takes routeVia: a queued request stays in its group', () => {
    const via = table([{ routeVia: { revisions: ['llama-a'] } }, QUEUE, REFUSE]);
    const w = waitOf(run(via, busy(via, B_DECODE), {}, ctx({ bound })));
    expect(w.group).toEqual(first.group);
    expect(w.trace).toContain(
      `fallback step 1 (routeVia): passed: the request is queued in group ${w.group.id}, and a queued request stays in its group`,
    );
  });
});

describe('fallback: routeVia', () => {
  const t = table([{ routeVia: { revisions: ['llama-a'] } }, REFUSE]);

  it('routes an unpinned request entirely through the other revision: a new group, both legs of it', () => {
    const d = routeOf(run(t, busy(t, B_DECODE)));
    expect(d.group.revision).toBe('llama-a');
    expect(d.group.fingerprint).toBe(t.revisions.get('llama-a')!.fingerprint);
    expect([d.decode.cluster, d.prefill?.cluster]).toEqual(['a_decode', 'a_prefill']);
    expect(d.fallback).toEqual([{ step: 'routeVia', outcome: 'routed' }]);
    const c = verifyContract(d.contract, keys, TEST_NOW_MS, { groupId: d.group.id, fingerprint: d.group.fingerprint });
    expect(c.ok && c.value.revision).toBe('llama-a');
    expect(d.trace.join('\n')).toMatch(
      /fallback step 1 \(routeVia\): route entirely through revision llama-a instead of llama-b: new group g_[0-9a-f]+ .*prefill and decode both of llama-a, before any prefill/,
    );
  });

  it('does not move a request pinned by its binding (eligible.notPinned), unless the table allows it', () => {
    const binding = routeOf(run(t, createTestWorkerView(t))).binding;
    const r = refusalOf(run(t, busy(t, B_DECODE), { binding }));
    expect(r.trace).toContain(
      "fallback step 1 (routeVia): passed: the request is pinned to revision llama-b by its session's binding (eligible.notPinned)",
    );
    const loose = table([{ routeVia: { revisions: ['llama-a'], eligible: { notPinned: false } } }, REFUSE]);
    expect(
      routeOf(run(loose, busy(loose, B_DECODE), { binding: routeOf(run(loose, createTestWorkerView(loose))).binding })).group.revision,
    ).toBe('llama-a');
  });

  it('never moves a request onto a revision with an adapter its own revision lacks, even with eligible.noAdapter: false', () => {
    // A base-model request bound to llama-b must not become a request of an adapter's group: the adapter's workers
    // would stamp, cache and salt its KV as adapter KV it is not, and a client asked for the base model.
    const adapter = { descriptor: testDescriptorInput({ weights: 'a', adapter: { id: 'acme/sql', revision: 'r1' } }) };
    for (const eligible of [undefined, { noAdapter: false }]) {
      const t = table([{ routeVia: { revisions: ['llama-a'], ...(eligible && { eligible }) } }, REFUSE], (v) => {
        v['revisions']['llama-a'] = adapter;
      });
      expect(refusalOf(run(t, busy(t, B_DECODE))).trace.join('\n')).toMatch(
        /llama-a serves adapter acme\/sql, which the request's revision llama-b does not: it would answer with an adapter the client did not ask for/,
      );
    }
  });

  it('skips a revision without the adapter, an unverified one, another model, and one without capacity', () => {
    const adapter = { descriptor: testDescriptorInput({ weights: 'b', adapter: { id: 'acme/sql', revision: 'r1' } }) };
    const withAdapter = table([{ routeVia: { revisions: ['llama-a'] } }, REFUSE], (v) => (v['revisions']['llama-b'] = adapter));
    expect(refusalOf(run(withAdapter, busy(withAdapter, B_DECODE))).trace.join('\n')).toMatch(
      /llama-a does not serve adapter acme\/sql, which the request's revision has \(eligible\.noAdapter\)/,
    );
    const unverified = table([{ routeVia: { revisions: ['llama-a'] } }, REFUSE], (v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' };
      v['revisions']['llama-a']['verification'] = { required: true, verified: false };
    });
    expect(refusalOf(run(unverified, busy(unverified, B_DECODE))).trace.join('\n')).toMatch(/llama-a is not verified/);
    const otherModel = table(
      [{ routeVia: { revisions: ['llama-a'] } }, REFUSE],
      (v) => (v['revisions']['llama-a'] = { descriptor: testDescriptorInput({ model: { id: 'mistral/Mistral-7B' } }) }),
    );
    expect(refusalOf(run(otherModel, busy(otherModel, B_DECODE))).trace.join('\n')).toMatch(
      /llama-a serves another model \(mistral\/Mistral-7B\)/,
    );
    const full = busy(t, B_DECODE, '10.0.2.1:9090', '10.0.2.2:9090');
    const r = refusalOf(run(t, full));
    expect(r.trace.join('\n')).toMatch(/llama-a has no decode capacity/);
    expect(r.fallback).toEqual([
      { step: 'routeVia', outcome: 'passed' },
      { step: 'refuse', outcome: 'refused' },
    ]);
  });
});

describe('fallback: recompute', () => {
  const recompute = { recompute: { prefillMsPerToken: 0.5, maxPromptTokens: 4000 } };

  it('serves on the decode endpoint of the same group without a prefill leg when that is cheaper than waiting', () => {
    const t = table([recompute, QUEUE, REFUSE]);
    const d = routeOf(run(t, busy(t, B_PREFILL), {}, ctx()));
    expect(d.group.revision).toBe('llama-b');
    expect(d.decode).toEqual({ pool: 'b-decode', cluster: 'b_decode', endpoint: B_DECODE });
    expect(d.prefill).toBeNull();
    const c = verifyContract(d.contract, keys, TEST_NOW_MS);
    expect(c.ok && c.value.prefill).toBeNull();
    expect(d.fallback).toEqual([{ step: 'recompute', outcome: 'recomputed' }]);
    expect(d.trace.join('\n')).toMatch(
      /fallback step 1 \(recompute\): serve on decode endpoint 10\.0\.4\.1:9090 .* about 7 tokens x 0\.5 ms = 4 ms, cheaper than the expected wait of 2000 ms \(queue step 2's longest wait\)/,
    );
  });

  it('waits instead when recomputing costs more than the longest wait, or the prompt is too long', () => {
    const t = table([{ recompute: { prefillMsPerToken: 1, maxPromptTokens: 4000 } }, QUEUE, REFUSE]);
    const long = 'x'.repeat(8000); // about 2000 tokens: 2004 ms of recompute
    const w = waitOf(run(t, busy(t, B_PREFILL), { content: long }, ctx()));
    expect(w.missing).toBe('prefill');
    expect(w.trace.join('\n')).toMatch(
      /fallback step 1 \(recompute\): passed: recomputing about 2004 tokens costs about 2004 ms, not less than the expected wait of 2000 ms/,
    );
    const tooLong = refusalOf(run(t, busy(t, B_PREFILL), { content: 'y'.repeat(20_000) }, { nowMs: TEST_NOW_MS, keys }));
    expect(tooLong.trace.join('\n')).toMatch(/passed: the prompt is about 5004 tokens, over maxPromptTokens 4000/);
  });

  it('without a later queue step, recomputing is cheaper than refusing', () => {
    const t = table([recompute, REFUSE]);
    expect(routeOf(run(t, busy(t, B_PREFILL), { content: 'x'.repeat(8000) })).prefill).toBeNull();
  });

  it('counts what the chat template renders besides message text (tools), and never recomputes what it cannot estimate', () => {
    const t = table([recompute, REFUSE]);
    const view = busy(t, B_PREFILL);
    const factsOf = (path: string, json: Record<string, unknown>): RequestFacts => {
      const body = parseOpenAiBody(path, new TextEncoder().encode(JSON.stringify({ model: 'llama-3-8b', ...json })), {
        maxBodyBytes: 1 << 24,
      });
      if (!body.ok) throw body.error;
      return { ...testFacts({ tenant: 'acme', session: 's-1' }), path, body: body.value };
    };
    const hi = [{ role: 'user', content: 'hi' }];
    // 20,000 characters of tool schema (about 5,000 tokens) go into the prompt: over maxPromptTokens 4000.
    const tools = [{ type: 'function', function: { name: 'lookup', description: 'd'.repeat(20_000), parameters: {} } }];
    const withTools = refusalOf(decide(factsOf('/v1/chat/completions', { messages: hi, tools }), t, view, ctx()));
    expect(withTools.trace.join('\n')).toMatch(
      /fallback step 1 \(recompute\): passed: the prompt is about 50\d\d tokens, over maxPromptTokens 4000/,
    );
    // Tool calls and their results are prompt text too.
    const call = { id: 'c1', type: 'function', function: { name: 'lookup', arguments: 'a'.repeat(20_000) } };
    const calls = [...hi, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'c1', content: 'ok' }];
    expect(refusalOf(decide(factsOf('/v1/chat/completions', { messages: calls }), t, view, ctx())).trace.join('\n')).toMatch(
      /passed: the prompt is about 50\d\d tokens, over maxPromptTokens 4000/,
    );
    // An image, audio or embeddings: the prompt's length is not in the text; recompute passes, saying why.
    const image = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'what is this?' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
        ],
      },
    ];
    expect(refusalOf(decide(factsOf('/v1/chat/completions', { messages: image }), t, view, ctx())).trace).toContain(
      'fallback step 1 (recompute): passed: the prompt carries content the gate cannot count (content part image_url), so its length is unknown',
    );
    const embeds = refusalOf(decide(factsOf('/v1/completions', { prompt_embeds: 'AAAA' }), t, view, ctx()));
    expect(embeds.trace).toContain(
      'fallback step 1 (recompute): passed: the prompt carries content the gate cannot count (prompt_embeds), so its length is unknown',
    );
    // Plain text is still recomputed.
    expect(routeOf(decide(factsOf('/v1/chat/completions', { messages: hi }), t, view, ctx())).prefill).toBeNull();
  });

  it('cannot help when decode capacity is missing', () => {
    const t = table([recompute, REFUSE]);
    expect(refusalOf(run(t, busy(t, B_DECODE))).trace).toContain(
      'fallback step 1 (recompute): passed: decode capacity is missing, and recompute needs a decode endpoint with room',
    );
  });
});

describe('fallback: refuse and the end of the chain', () => {
  it('a chain without refuse ends with 503 and the default retry-after', () => {
    const t = table([QUEUE]);
    const r = refusalOf(run(t, busy(t, B_DECODE), {}, { nowMs: TEST_NOW_MS, keys }));
    expect(r).toMatchObject({
      code: 'no_compatible_capacity',
      retryAfterSeconds: 5,
      fallback: [
        { step: 'queue', outcome: 'passed' },
        { step: 'end', outcome: 'refused' },
      ],
    });
  });
});
