/**
 * Envoy-shaped local replies: the headers `Utility::prepareLocalReply` builds (`:status`, then the caller's header
 * changes, then content-length and a text/plain content-type unless one was set; neither for an empty body) and the router's texts for upstream
 * failures, so tests and servers see what Envoy would send.
 */
import type { LocalReply } from './ext-proc-effects.js';
import { HeaderMap } from './header-map.js';
import type { UpstreamFailure } from './upstream.js';

export function localReplyHeaders(reply: LocalReply): HeaderMap {
  const headers = new HeaderMap([[':status', String(reply.status)]]);
  reply.mutateHeaders?.(headers);
  if (reply.body.length > 0) {
    headers.set('content-length', String(reply.body.length));
    if (!headers.has('content-type')) headers.set('content-type', 'text/plain');
  } else {
    // Utility::prepareLocalReply: an empty body has neither (the HTTP/1 codec writes content-length: 0 itself).
    headers.remove('content-length');
    headers.remove('content-type');
  }
  return headers;
}

const FAILURE_REASON: Record<UpstreamFailure['kind'], string> = {
  connect_failure: 'connection failure',
  connect_timeout: 'connection timeout',
  reset_before_headers: 'connection termination',
};

/** The router's 503 for an upstream that failed before sending headers (response flag UF). */
export function upstreamFailureReply(failure: UpstreamFailure): LocalReply {
  const reason = FAILURE_REASON[failure.kind];
  const transport = failure.kind === 'reset_before_headers' ? '' : `, transport failure reason: ${failure.reason}`;
  return {
    status: 503,
    body: Buffer.from(`upstream connect error or disconnect/reset before headers. reset reason: ${reason}${transport}`),
    details: `upstream_reset_before_response_started{${reason.replace(/ /g, '_')}}`,
  };
}
