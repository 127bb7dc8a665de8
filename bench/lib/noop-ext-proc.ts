/**
 * The floor: an ext_proc server built with the same library and server options as kvgate's gate, which answers
 * every message with an empty CONTINUE of the matching kind. Whatever the gate costs above this is kvgate's own
 * work (header parsing, body parsing, the decision, token minting, mutations); whatever both cost is grpc-js,
 * HTTP/2 and the loopback.
 */
import * as grpc from '@grpc/grpc-js';
import { extProcService } from '../../src/envoy/protos.js';

type Msg = Record<string, unknown>;

/** The empty answer for each ProcessingRequest kind (CommonResponse defaults to status CONTINUE). */
const EMPTY: Readonly<Record<string, Msg>> = {
  request_headers: { request_headers: { response: {} } },
  request_body: { request_body: { response: {} } },
  request_trailers: { request_trailers: {} },
  response_headers: { response_headers: { response: {} } },
  response_body: { response_body: { response: {} } },
  response_trailers: { response_trailers: {} },
};

export interface NoopExtProcServer {
  readonly port: number;
  close(): void;
}

export async function startNoopExtProcServer(listen = '127.0.0.1:0'): Promise<NoopExtProcServer> {
  const server = new grpc.Server({ 'grpc.max_concurrent_streams': 100_000, 'grpc.keepalive_permit_without_calls': 1 });
  server.addService(extProcService(), {
    Process: (call: grpc.ServerDuplexStream<Msg, Msg>) => {
      call.on('data', (msg: Msg) => {
        const kind = typeof msg['request'] === 'string' ? msg['request'] : '';
        const answer = EMPTY[kind];
        if (answer === undefined)
          call.destroy(Object.assign(new Error(`unexpected message ${kind}`), { code: grpc.status.INVALID_ARGUMENT }));
        else call.write(answer);
      });
      call.on('end', () => call.end());
      call.on('error', () => undefined);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(listen, grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  return { port, close: () => server.forceShutdown() };
}
