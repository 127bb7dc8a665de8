/**
 * How a sidecar sends its status document (`GET /kvgate/v1/status`): signed for the poll's nonce when the caller sent
 * one (the gate always does; src/contract/status-signature.ts), unsigned otherwise (a human with curl gets the same
 * JSON). The signature covers the exact bytes sent, so the body is serialised once, here.
 */
import type http from 'node:http';
import type { KeyRing } from '../contract/keys.js';
import { parseStatusNonce, signStatus } from '../contract/status-signature.js';
import { KvgateError } from '../errors.js';
import { H } from '../headers.js';
import { headerValue } from './context.js';

/** The poll's nonce (undefined when none was sent), or why the one sent is refused (answered 400 by the caller). */
export function statusNonceOf(headers: http.IncomingHttpHeaders): { nonce: string | undefined } | { error: KvgateError } {
  const raw = headerValue(headers, H.statusNonce);
  if (raw === undefined) return { nonce: undefined };
  const parsed = parseStatusNonce(raw);
  return parsed.ok ? { nonce: parsed.value } : { error: new KvgateError('bad_request', parsed.error.message) };
}

/** Send `body` as the status answer: with `x-kvgate-status-signature` for `nonce` under the ring's current key. */
export function sendStatus(res: http.ServerResponse, body: unknown, keys: KeyRing, nonce: string | undefined): void {
  const bytes = Buffer.from(`${JSON.stringify(body)}\n`, 'utf8');
  const signature = nonce === undefined ? {} : { [H.statusSignature]: signStatus(keys, nonce, bytes) };
  res.writeHead(200, { ...signature, 'content-type': 'application/json', 'content-length': bytes.byteLength, 'cache-control': 'no-store' });
  res.end(bytes);
}
