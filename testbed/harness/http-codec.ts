/**
 * HTTP/1.1 <-> Envoy header maps, as Envoy's codec and HCM shape them: `Host` becomes `:authority`, `:path`,
 * `:method` and `:scheme` are added, hop-by-hop headers are dropped, `x-forwarded-proto` and `x-request-id` are
 * added when absent (the HCM does that before any filter runs), and the reverse on the way out.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { HeaderMap } from './header-map.js';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

/** The downstream request as the filter chain sees it. */
export function requestHeadersFromNode(req: IncomingMessage, newRequestId: () => string = randomUUID): HeaderMap {
  const headers = new HeaderMap();
  headers.add(':authority', req.headers.host ?? '');
  headers.add(':path', req.url ?? '/');
  headers.add(':method', req.method ?? 'GET');
  headers.add(':scheme', 'http');
  const raw = HeaderMap.fromRaw(req.rawHeaders);
  for (const [k, v] of raw.entries()) {
    if (k === 'host' || HOP_BY_HOP.has(k)) continue;
    headers.add(k, v);
  }
  if (!headers.has('x-forwarded-proto')) headers.add('x-forwarded-proto', 'http');
  if (!headers.has('x-request-id')) headers.add('x-request-id', newRequestId());
  return headers;
}

/** Whether an HTTP/1.1 request carries a body (Envoy's codec sends end_stream with the headers otherwise). */
export function requestHasBody(req: IncomingMessage): boolean {
  const te = req.headers['transfer-encoding'];
  if (te !== undefined && /chunked/i.test(te)) return true;
  const cl = req.headers['content-length'];
  return cl !== undefined && Number(cl) > 0;
}

/** Node request headers for the upstream leg: `host` from `:authority`, chunked when the length is unknown. */
export function upstreamRequestHeaders(headers: HeaderMap, hasBody: boolean): Record<string, string | string[]> {
  const out = headers.toNodeHeaders();
  out['host'] = headers.get(':authority') ?? '';
  if (hasBody && out['content-length'] === undefined) out['transfer-encoding'] = 'chunked';
  return out;
}

/** An upstream response as the encode path sees it: `:status` first, hop-by-hop headers gone. */
export function responseHeadersFromNode(res: IncomingMessage): HeaderMap {
  const headers = new HeaderMap([[':status', String(res.statusCode ?? 502)]]);
  for (const [k, v] of HeaderMap.fromRaw(res.rawHeaders).entries()) {
    if (!HOP_BY_HOP.has(k)) headers.add(k, v);
  }
  return headers;
}

/** Whether a response has a body to read (HEAD, 204 and 304 never do). */
export function responseHasBody(method: string, res: IncomingMessage): boolean {
  const status = res.statusCode ?? 200;
  if (method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200)) return false;
  const cl = res.headers['content-length'];
  return cl === undefined || Number(cl) > 0;
}
