/**
 * kvgate's own work per request, in-process and without gRPC: the three ext_proc messages of a buffered request
 * (request_headers, request_body, response_headers) as Envoy encodes them, through the gate's direct decoder
 * (src/envoy/request-decoder.ts), the session (src/gate/session.ts) with a real admission, key ring and table, and the
 * answer encoder (src/envoy/response-encoder.ts), 64 requests in flight. The same calls the gate's stream adapter
 * makes, in its order: an answer that is ready is taken at once, one admission parks is awaited.
 *
 * The whole-gate figures carry grpc-js, HTTP/2 and a second process's scheduling; this one isolates the code kvgate
 * owns. Single runs still vary (V8's tiering and the collector's sizing differ from run to run), so compare two builds
 * by alternating runs of each in the same setting (bench/README.md).
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../../src/decide/worker-view.js';
import { decodeRequest } from '../../src/envoy/request-decoder.js';
import { encodeAnswer } from '../../src/envoy/response-encoder.js';
import { extProcService } from '../../src/envoy/protos.js';
import type { WireProcessingRequest, WireProcessingResponse } from '../../src/envoy/wire.js';
import { createAdmission } from '../../src/gate/admission.js';
import { createGateMetrics } from '../../src/gate/metrics.js';
import { ExtProcSession } from '../../src/gate/session.js';
import type { CompiledRouteTable } from '../../src/policy/compile.js';
import { envoyMessages } from './ext-proc-load.js';
import type { BenchRequest } from './requests.js';

export interface SessionPathRun {
  readonly requests: number;
  /** CPU time of this process per request (user + system), microseconds. */
  readonly cpuUsPerRequest: number;
  readonly routed: number;
}

const IN_FLIGHT = 64;

type Encoded = readonly [Buffer, Buffer, Buffer];

function encodedMessages(req: BenchRequest): Encoded {
  const serialize = extProcService()['Process']!.requestSerialize as (m: WireProcessingRequest) => Buffer;
  const [headers, body, response] = envoyMessages(req).map((m) => serialize(m as WireProcessingRequest));
  return [headers!, body!, response!];
}

/** `requests` requests after `warmup` more, `IN_FLIGHT` at a time, each request's messages in order. */
export async function measureSessionPath(opts: {
  readonly table: CompiledRouteTable;
  readonly requests: readonly BenchRequest[];
  readonly count: number;
  readonly warmup: number;
}): Promise<SessionPathRun> {
  const inFlight = createInFlightTracker();
  const state = { table: opts.table, view: createStaticWorkerView(opts.table, inFlight) };
  const ring = createDevKeyRing('kvgate-bench');
  const admission = createAdmission({ state: () => state, keys: () => ring, inFlight, now: Date.now });
  let ids = 0;
  const deps = {
    admission,
    logger: pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: true })),
    metrics: createGateMetrics(new Registry()),
    newRequestId: () => `bench-${ids++}`,
    now: Date.now,
    gieHeaders: false,
  };
  const messages = opts.requests.map(encodedMessages);
  const genericEncode = extProcService()['Process']!.responseSerialize as (r: WireProcessingResponse) => Buffer;
  let routed = 0;
  const one = async (i: number): Promise<void> => {
    const session = new ExtProcSession(deps, 'public', () => {});
    for (const bytes of messages[i % messages.length]!) {
      const msg = decodeRequest(bytes);
      if (msg === undefined) throw new Error('bench message needs the generic decoder');
      const ready = session.answerNow(msg);
      const answer = ready instanceof Promise ? await ready : ready;
      if (answer === null) throw new Error('the session left a bench message unanswered');
      if (answer.request_body?.response?.header_mutation !== undefined) routed++;
      (encodeAnswer(answer) ?? genericEncode(answer)).length;
    }
    session.finish();
  };
  const run = async (n: number): Promise<void> => {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < n) await one(next++);
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  };
  await run(opts.warmup);
  routed = 0;
  const before = process.cpuUsage();
  await run(opts.count);
  const used = process.cpuUsage(before);
  return { requests: opts.count, cpuUsPerRequest: (used.user + used.system) / opts.count, routed };
}
