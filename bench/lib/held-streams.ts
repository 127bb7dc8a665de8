/**
 * Many ext_proc streams held open at once, as Envoy holds one per request for the whole life of a long LLM
 * response: each stream sends request_headers and the buffered request_body (so the gate has decided and keeps
 * the decision, contract and in-flight count for it), then waits, without sending response_headers, until the
 * bench lets go. Used to measure a server's memory per open stream.
 */
import * as grpc from '@grpc/grpc-js';
import { extProcClientConstructor } from '../../src/envoy/protos.js';
import type { BenchRequest } from './requests.js';

type Msg = Record<string, any>;

export interface HeldStreams {
  /** Streams fully opened (both answers received). */
  readonly open: number;
  readonly failed: number;
  readonly firstError?: string;
  /** End every stream (send response_headers, half-close) and close the connections; bounded by `timeoutMs`. */
  release(timeoutMs?: number): Promise<void>;
}

export interface HoldOptions {
  readonly address: string;
  readonly streams: number;
  /** Streams per HTTP/2 connection (Envoy multiplexes many requests over few connections). */
  readonly perChannel?: number;
  /** How many streams may be opening at once (the rest wait), so opening is bounded and steady. */
  readonly openConcurrency?: number;
  readonly request: (i: number) => BenchRequest;
  /** Also send the request body (the gate decides and keeps state per stream); headers only otherwise. */
  readonly withBody: boolean;
  readonly timeoutMs?: number;
}

const headerMap = (h: Readonly<Record<string, string>>) => ({
  headers: Object.entries(h).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })),
});

interface Opened {
  readonly call: grpc.ClientDuplexStream<Msg, Msg>;
  /** Settles when the stream's status arrives (whenever that is). */
  readonly closed: Promise<void>;
  readonly error?: string;
}

function openOne(client: any, req: BenchRequest, withBody: boolean, timeoutMs: number): Promise<Opened> {
  return new Promise((resolve) => {
    const call: grpc.ClientDuplexStream<Msg, Msg> = client.Process(new grpc.Metadata());
    const closed = new Promise<void>((r) => call.on('status', () => r()));
    let answers = 0;
    const timer = setTimeout(() => resolve({ call, closed, error: `no answer within ${timeoutMs} ms` }), timeoutMs);
    call.on('data', (m: Msg) => {
      answers += 1;
      if (m['immediate_response'] !== undefined) {
        clearTimeout(timer);
        resolve({ call, closed, error: 'refused (immediate_response)' });
      } else if (answers === 1 && withBody) {
        call.write({ request_body: { body: req.body, end_of_stream: true } });
      } else {
        clearTimeout(timer);
        resolve({ call, closed });
      }
    });
    call.on('status', (s: grpc.StatusObject) => {
      clearTimeout(timer);
      resolve({ call, closed, error: `${grpc.status[s.code]}: ${s.details}` });
    });
    call.on('error', () => undefined);
    call.write({
      request_headers: { headers: headerMap(req.headers), end_of_stream: false },
      protocol_config: { request_body_mode: 'BUFFERED' },
    });
  });
}

export async function holdStreams(opts: HoldOptions): Promise<HeldStreams> {
  const Client = extProcClientConstructor();
  const perChannel = opts.perChannel ?? 1000;
  const clients = Array.from(
    { length: Math.ceil(opts.streams / perChannel) },
    () => new Client(opts.address, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }),
  );
  const calls: Opened[] = [];
  let failed = 0;
  let firstError: string | undefined;
  let next = 0;
  const opener = async () => {
    while (next < opts.streams) {
      const i = next++;
      const r = await openOne(clients[Math.floor(i / perChannel)], opts.request(i), opts.withBody, opts.timeoutMs ?? 30_000);
      calls.push(r);
      if (r.error !== undefined) {
        failed += 1;
        firstError ??= r.error;
      }
    }
  };
  await Promise.all(Array.from({ length: opts.openConcurrency ?? 64 }, opener));
  return {
    open: opts.streams - failed,
    failed,
    ...(firstError === undefined ? {} : { firstError }),
    async release(timeoutMs = 30_000) {
      for (const { call } of calls) call.end();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(calls.map((c) => c.closed)), new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
      clearTimeout(timer);
      for (const c of clients) c.close();
    },
  };
}
