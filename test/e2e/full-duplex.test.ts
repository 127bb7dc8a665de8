/**
 * Issue 14, item 5: FULL_DUPLEX_STREAMED request bodies end to end, through the harness playing Envoy's full-duplex
 * mode (testbed/harness/ext-proc-duplex.ts), the gate, sidecars and simulated vLLM workers, on both ext_proc stream
 * lifetimes (Envoy 1.36 and 1.37). The topology's envoy.yaml is the shipped one rendered with
 * `--request-body-mode FULL_DUPLEX_STREAMED`, what `--gie` renders and GIE's gateways send. Envoy streams every
 * chunk to the gate and drains its own copy, so the worker gets only the body the gate streams back: a wrong answer
 * for this mode (a plain body mutation, an answer out of order, an answer to the repeated end_of_stream chunk) fails
 * the request in the harness as in Envoy.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../src/headers.js';
import { baseline, completion, firstDivergence, PROMPTS } from '../../testbed/demo/scenarios.js';
import { SERVED_MODEL, startTopology, type Topology } from '../../testbed/demo/topology.js';
import { chunkedRequest, ENVOY_VERSIONS, ok, type HttpResult } from '../../testbed/harness/index.js';
import { client, silent } from './failure-matrix-support.js';

const MAX_BODY = 8192;
const PROMPT = `Grüße aus 東京: ${PROMPTS[1]}`;

/** The body cut inside the 3-byte character 東 and inside the JSON number `12` (max_tokens). */
function awkwardParts(body: Buffer): Buffer[] {
  const inChar = body.indexOf(Buffer.from('東')) + 1;
  const inNumber = body.indexOf(Buffer.from('"max_tokens":12')) + '"max_tokens":1'.length;
  expect(inChar).toBeGreaterThan(0);
  expect(inNumber).toBeGreaterThan(inChar);
  return [body.subarray(0, inChar), body.subarray(inChar, inNumber), body.subarray(inNumber)];
}

function tokenIds(r: HttpResult): number[] {
  return (JSON.parse(r.body).choices?.[0]?.token_ids ?? []) as number[];
}

describe.each(ENVOY_VERSIONS)('FULL_DUPLEX_STREAMED request bodies through Envoy %s', (envoyVersion) => {
  let t: Topology;
  const msgsSent = () => t.harness.stats()['http.kvgate_public.ext_proc.stream_msgs_sent'] ?? 0;
  const post = (parts: readonly (string | Buffer)[], headers: Record<string, string>, trailers?: Record<string, string>) =>
    chunkedRequest(t.publicUrl, parts, {
      path: '/v1/completions',
      headers: { 'content-type': 'application/json', ...headers },
      ...(trailers ? { trailers } : {}),
    });

  beforeAll(async () => {
    t = await startTopology({
      logger: silent,
      envoyVersion,
      candidateWeight: 0,
      requestBodyMode: 'FULL_DUPLEX_STREAMED',
      routeTable: { limits: { maxBodyBytes: MAX_BODY } },
      // Every request here also gets Envoy's empty end_of_stream chunk a second time once its body ended, as 1.35 to
      // 1.39 send it when a filter ahead of ext_proc resumes (GIE gateways run several): the gate must leave it
      // unanswered, or the routed request fails (a plain answer is spurious in this mode).
      duplexRepeatEndOfStream: true,
    });
  });
  afterAll(() => t.close());

  it('a routed P/D request returns the baseline completion and the stamps', async () => {
    const before = msgsSent();
    const body = JSON.stringify(completion(PROMPTS[0], 8));
    const r = ok(await post([body], client('acme', 'duplex-1')));
    expect(r.status).toBe(200);
    expect(r.headers[H.revision]).toBe('llama-a');
    expect(String(r.headers[H.group])).toMatch(/\S/);
    expect(String(r.headers[H.binding])).toMatch(/^kvgate\./);
    expect(firstDivergence(tokenIds(r), await baseline(t, 'llama-a', PROMPTS[0], 8))).toBe(-1);
    // headers, the body chunk, the empty end_of_stream chunk, the response headers
    expect(msgsSent() - before).toBeGreaterThanOrEqual(4);
  });

  it('a body cut inside a UTF-8 character and inside a JSON number is decided on the whole body', async () => {
    const body = Buffer.from(JSON.stringify({ model: SERVED_MODEL, prompt: PROMPT, max_tokens: 12, return_token_ids: true }));
    const before = msgsSent();
    const r = ok(await post(awkwardParts(body), client('acme', 'duplex-2')));
    expect(r.status).toBe(200);
    const ids = tokenIds(r);
    // The same tokens as the worker gives the whole body directly: the prompt's bytes arrived intact, and more than
    // 2 tokens means max_tokens was not read as the 1 or the 2 on either side of the cut.
    expect(ids.length).toBeGreaterThan(2);
    expect(firstDivergence(ids, await baseline(t, 'llama-a', PROMPT, 12))).toBe(-1);
    expect(msgsSent() - before).toBeGreaterThanOrEqual(6); // headers, 3 chunks, end_of_stream, response headers
  });

  it('a body that ends with trailers is decided at the trailers message and reaches the worker whole', async () => {
    const body = Buffer.from(JSON.stringify({ model: SERVED_MODEL, prompt: PROMPT, max_tokens: 12, return_token_ids: true }));
    const r = ok(await post(awkwardParts(body), client('acme', 'duplex-3'), { 'x-client-checksum': 'abc' }));
    expect(r.status).toBe(200);
    expect(firstDivergence(tokenIds(r), await baseline(t, 'llama-a', PROMPT, 12))).toBe(-1);
  });

  it.each([
    ['a tenant the model is not offered to', client('initech', 'duplex-4'), SERVED_MODEL, 403, 'tenant_scope_denied'],
    ['an unknown model', client('acme', 'duplex-5'), 'no-such-model', 404, 'unknown_model'],
  ] as const)('%s gets the gate refusal', async (_name, headers, model, status, code) => {
    const body = JSON.stringify({ model, prompt: 'hello', max_tokens: 4 });
    const r = ok(await post([body.slice(0, 12), body.slice(12)], headers));
    expect(r.status).toBe(status);
    expect(r.headers[H.rejectReason]).toBe(code);
    expect(JSON.parse(r.body).error).toMatchObject({ type: 'kvgate_error', code });
  });

  it("a body over limits.maxBodyBytes gets the gate's 413 body_too_large (Envoy buffers nothing in this mode)", async () => {
    const prompt = 'x'.repeat(MAX_BODY);
    const body = JSON.stringify({ model: SERVED_MODEL, prompt, max_tokens: 4 });
    const r = ok(await post([body.slice(0, MAX_BODY / 2), body.slice(MAX_BODY / 2, MAX_BODY + 64), body.slice(MAX_BODY + 64)], client()));
    expect(r.status).toBe(413);
    expect(r.headers[H.rejectReason]).toBe('body_too_large');
    expect(JSON.parse(r.body).error.message).toMatch(new RegExp(`limit ${MAX_BODY} bytes`));
  });
});
