/**
 * When Envoy 1.37 closes the ext_proc stream after a reply (`Filter::closeGrpcStreamIfLastRespReceived`,
 * source/extensions/filters/http/ext_proc/ext_proc.cc, envoyproxy/envoy#41425), with the fix that makes a
 * response-path reply wait for the request path (#45617, backported to v1.37 as #46836: "The fix requires both
 * directions to be complete (noMoreExternalProcess()) before closing the stream").
 */
import { describe, expect, it } from 'vitest';
import type { ProcessingMode } from './envoy-config-types.js';
import { isLastResponse } from './ext-proc-effects.js';
import { ProcessorState } from './processor-state.js';

const MODE: ProcessingMode = {
  request_header_mode: 'SEND',
  response_header_mode: 'SEND',
  request_body_mode: 'FULL_DUPLEX_STREAMED',
  response_body_mode: 'NONE',
  request_trailer_mode: 'SEND',
  response_trailer_mode: 'SKIP',
};

describe('isLastResponse (1.37 stream close)', () => {
  const dec = new ProcessorState('request', MODE);
  const enc = new ProcessorState('response', MODE);

  it('a response_headers reply with nothing left on the response path closes only once the request path is done', () => {
    const msg = { response: 'response_headers' as const, response_headers: {} };
    // The request body still streams through the processor (e.g. the upstream answered early): the stream stays.
    expect(isLastResponse(msg, dec, enc, false)).toBe(false);
    expect(isLastResponse(msg, dec, enc, true)).toBe(true);
  });

  it('response trailers likewise; request-path replies still need the response path idle', () => {
    expect(isLastResponse({ response: 'response_trailers', response_trailers: {} }, dec, enc, false)).toBe(false);
    expect(isLastResponse({ response: 'response_trailers', response_trailers: {} }, dec, enc, true)).toBe(true);
    // Response headers SEND: the request trailers reply is not the last one.
    expect(isLastResponse({ response: 'request_trailers', request_trailers: {} }, dec, enc, true)).toBe(false);
  });
});
