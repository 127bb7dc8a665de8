/**
 * ext_proc messages -> request facts: the one place a request changes shape on its way in. The session collects
 * what Envoy sends (the headers message, the body chunks, the forwarded metadata); this turns it into the facts the
 * decision core reads. Gate-owned headers become facts only where they are trusted: a hop's contract and targets
 * on the internal listener, a binding anywhere (it is signed, and only ever narrows the choice to a revision the
 * table still serves).
 */
import type { RawRequestFacts } from '../decide/decide-request.js';
import { H } from '../headers.js';
import type { ReceivedHeaders } from './headers.js';

/** Which Envoy listener's filter opened the stream (gRPC initial metadata `x-kvgate-listener`). */
export type Listener = 'public' | 'internal';

/** What one ext_proc stream collected for its request. */
export interface ReceivedRequest {
  readonly requestId: string;
  readonly listener: Listener;
  /** The request headers message, read by `readHeaderMap` (or `receiveHeaders` for a dry run). */
  readonly headers: ReceivedHeaders;
  /** `metadata_context.filter_metadata`, namespace -> plain JSON. */
  readonly metadata: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** The request body; absent when the decision is taken on the headers (no body). */
  readonly body?: Uint8Array;
  /** True when Envoy sent only part of the body (BUFFERED_PARTIAL over its buffer limit). */
  readonly bodyTruncated: boolean;
}

/** The request as the decision core reads it. */
export function toRequestFacts(r: ReceivedRequest): RawRequestFacts {
  const { headers, gateOwned } = r.headers;
  const binding = gateOwned[H.binding];
  const contract = r.listener === 'internal' ? gateOwned[H.contract] : undefined;
  const exclude = gateOwned[H.retryExclude];
  return {
    requestId: r.requestId,
    method: headers[':method'] ?? 'GET',
    path: headers[':path'] ?? '/',
    headers,
    // Values that were not valid UTF-8: never read as an identity (request-facts.ts, decide.ts).
    ...(r.headers.invalid.length === 0 ? {} : { invalidHeaders: r.headers.invalid }),
    // A `!` in a value Envoy sanitised (send_header_raw_value off) may stand for such a byte (headers.ts).
    ...(r.headers.sanitized.length === 0 ? {} : { sanitizedHeaders: r.headers.sanitized }),
    metadata: r.metadata,
    listener: r.listener,
    bodyTruncated: r.bodyTruncated,
    ...(r.body === undefined ? {} : { body: r.body }),
    ...(binding === undefined ? {} : { binding }),
    ...(contract === undefined
      ? {}
      : {
          hop: {
            contract,
            ...(gateOwned[H.prefillCluster] === undefined ? {} : { prefillCluster: gateOwned[H.prefillCluster] }),
            ...(gateOwned[H.prefillEndpoint] === undefined ? {} : { prefillEndpoint: gateOwned[H.prefillEndpoint] }),
            ...(exclude === undefined
              ? {}
              : {
                  retryExclude: exclude
                    .split(',')
                    .map((s) => s.trim())
                    .filter((s) => s.length > 0),
                }),
          },
        }),
  };
}
