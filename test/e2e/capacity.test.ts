/**
 * Issue 14, item 1: a request counts against its endpoint from the gate's decision until the worker has finished
 * it, whatever the ext_proc stream's lifetime. Run on both lifetimes the harness plays: Envoy 1.37 closes the ext_proc
 * stream right after the response_headers answer, so a streamed generation's stream is gone at its first token and
 * the gate must keep counting it from what the decode sidecar reports; Envoy 1.36 keeps it until the request ends.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { client, complete, silent, stream } from './failure-matrix-support.js';

/** The gate's in-flight count per endpoint, from its /status document. */
function inFlight(t: Topology): Record<string, number> {
  return (t.gate.status() as { inFlight: Record<string, number> }).inFlight;
}

describe.each(['1.36', '1.37'] as const)('Envoy %s: maxInFlightPerEndpoint 1 holds for a streamed generation', (envoyVersion) => {
  let t: Topology;
  beforeAll(async () => {
    t = await startTopology({
      logger: silent,
      envoyVersion,
      candidateWeight: 0,
      sidecarProbeIntervalMs: 60_000,
      maxInFlightPerEndpoint: 1,
      sim: { latency: { decodeMsPerToken: 25 } },
      routeTable: { fallback: [{ queue: { deadlineMs: 10_000, maxDepth: 4 } }, { refuse: { retryAfterSeconds: 1 } }] },
    });
  });
  afterAll(() => t.close());

  it('a second request waits for the first to finish instead of joining the busy endpoint', async () => {
    const decode = t.worker('llama-a', 'decode').address;
    const first = await stream(t, 'a long streamed generation', 60, client('acme', 'cap-1'));
    expect(first.status).toBe(200);
    const reader = first.body!.getReader();
    const firstChunk = await reader.read(); // the first token: on 1.37 the ext_proc stream has closed by now
    expect(firstChunk.done).toBe(false);
    await t.gate.refreshWorkerView();
    expect(inFlight(t)[decode]).toBe(1);
    const second = complete(t, 'a short one', 2, client('acme', 'cap-2'));
    let firstEndedAt = 0;
    const drained = (async () => {
      for (let r = await reader.read(); !r.done; r = await reader.read());
      firstEndedAt = Date.now();
    })();
    const r = await second;
    const secondEndedAt = Date.now();
    await drained;
    expect(r.status).toBe(200);
    // Served only once the 60-token generation was over: it waited in the queue, it did not share the endpoint.
    expect(secondEndedAt).toBeGreaterThanOrEqual(firstEndedAt);
    await t.gate.refreshWorkerView();
    expect(inFlight(t)[decode] ?? 0).toBe(0);
  }, 30_000);
});
