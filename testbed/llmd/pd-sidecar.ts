/**
 * An llm-d-style P/D sidecar for tests: what llm-d's routing sidecar does in front of a decode worker (NIXL v2
 * connector, READ mode), written from llm-d/llm-d-router `pkg/sidecar/proxy` (`chat_completions.go`,
 * `connector_nixlv2.go`, `proxy.go`, `proxy_helpers.go`) and `pkg/common/routing/common.go`. Two versions, because
 * the prefill-failure handling changed (llm-d/llm-d-router #1206, a0173a7a6, 2026-06-12):
 *
 * - `'ebab687'` (default; llm-d/llm-d-router @ebab687927f5, 2026-08-22, the newest we read): a non-2xx prefill answer
 *   (`isHTTPError`: <200 or >=300) is relayed to the client as is, after up to `prefillMaxRetries` (llm-d's
 *   `--prefill-max-retries`, default 0) retries of the same request to the same host for 502/503/504
 *   (`isRetryableStatus`), `prefillRetryBackoffMs` apart (`--prefill-retry-backoff`, default 200ms). There is no
 *   decode-only fallback any more. The chat/completions/messages token caps include `min_tokens`
 *   (`chatCompletionTokenLimitFields`, #2041 69c3ccb2a); `/v1/messages` and `/inference/v1/generate` (caps inside
 *   `sampling_params`, `max_tokens` and `min_tokens`) also run the protocol.
 * - `'520af478'` (llm-d/llm-d-inference-scheduler, now llm-d-router, @520af478, 2026-05-17): 400..451 is relayed;
 *   any other failure falls back to decode-only with the original request and the original headers
 *   (`shouldFallbackToDecode`, `cloneRequestWithBody(r, original)`: no added request id). Caps: `max_tokens`,
 *   `max_completion_tokens` (`max_output_tokens` for the Responses API); routes: chat, completions, responses.
 *
 * Both:
 * - The prefill target is the `x-prefiller-host-port` header (`routing.PrefillEndpointHeader`, the scheduler's
 *   choice; one value that is a comma list is split and the first taken), removed before anything is forwarded.
 *   Without it the request goes to the decoder as is. (Prefiller sampling and the SSRF allowlist are not modelled.)
 * - Prefill: `r.Clone` (every header, the gate's `x-request-id` and `x-kvgate-contract` included),
 *   `Header.Add("x-request-id", <uuid>)` adds a SECOND request id, and the body gets `kv_transfer_params`
 *   {do_remote_decode: true, do_remote_prefill: false, remote_*: null}, `stream: false`, no `stream_options`, and every
 *   token cap field set to 1 (added when absent). Sent straight to `http://<prefill host>` (no Envoy hop; `https://`
 *   with `--enable-tls=prefiller`, not modelled). A prefill host that does not answer is Go's ReverseProxy default:
 *   502 with an empty body.
 * - Decode: the original body with `kv_transfer_params` set to the prefill answer's (JSON `null` when the answer has
 *   none), cloned headers plus the same added request id, to the decoder URL; the answer is piped back.
 *
 * Node's HTTP server joins the two `x-request-id` lines as "<gate id>, <uuid>", which is what kvgate's sidecars see.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { TOY_PROXY_PREFILL_KV } from '../sim/testing.js';

/** `routing.PrefillEndpointHeader` (llm-d/llm-d-router `pkg/common/routing/common.go` @ebab687; unchanged since 520af478). */
export const PREFILL_ENDPOINT_HEADER = 'x-prefiller-host-port';

/** Which llm-d sidecar to model (see the file comment). */
export type LlmdVersion = 'ebab687' | '520af478';

type Caps = { readonly fields: readonly string[]; readonly inSamplingParams?: true };

const CHAT_CAPS: Readonly<Record<LlmdVersion, Caps>> = {
  // `chatCompletionTokenLimitFields` (proxy.go): @520af478 max_tokens, max_completion_tokens; #2041 added min_tokens.
  '520af478': { fields: ['max_tokens', 'max_completion_tokens'] },
  ebab687: { fields: ['max_tokens', 'max_completion_tokens', 'min_tokens'] },
};
const RESPONSES_CAPS: Caps = { fields: ['max_output_tokens'] };

/** `createRoutes` (proxy.go): the POST paths that run the P/D protocol, and their `tokenLimitFieldsForAPIType`. */
function pdRoutes(version: LlmdVersion): Readonly<Record<string, Caps>> {
  const chat = CHAT_CAPS[version];
  const common = { '/v1/chat/completions': chat, '/v1/completions': chat, '/v1/responses': RESPONSES_CAPS };
  if (version === '520af478') return common;
  // `generateStyleTokenLimitFields`, applied inside `sampling_params` (`tokenLimitMap`).
  return { ...common, '/v1/messages': chat, '/inference/v1/generate': { fields: ['max_tokens', 'min_tokens'], inSamplingParams: true } };
}

export interface LlmdSidecar {
  readonly url: string;
  readonly port: number;
  /** Prefill requests sent (each retry one entry), with the headers they carried (for assertions). */
  readonly prefills: Array<{ target: string; requestIds: string[]; status: number }>;
  close(): Promise<void>;
}

export interface LlmdSidecarOptions {
  readonly decoderUrl: string;
  readonly host?: string;
  readonly port?: number;
  /** Default `'ebab687'` (current). */
  readonly version?: LlmdVersion;
  /** `--prefill-max-retries` (ebab687 only; default 0). */
  readonly prefillMaxRetries?: number;
  /** `--prefill-retry-backoff` in ms (default 200). */
  readonly prefillRetryBackoffMs?: number;
}

/** Start the sidecar on `host:port` (0: any free port) in front of `decoderUrl`. */
export async function startLlmdSidecar(opts: LlmdSidecarOptions): Promise<LlmdSidecar> {
  const prefills: LlmdSidecar['prefills'] = [];
  const server = http.createServer((req, res) => {
    void handle(req, res, opts, prefills).catch((e: unknown) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`llm-d sidecar: ${(e as Error).message}`);
    });
  });
  // A listen error must reject (not throw out of the event loop), so the topology's onFreshPorts can start again
  // on fresh ports when a reserved port was taken in between.
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${opts.host ?? '127.0.0.1'}:${port}`,
    port,
    prefills,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** `isHTTPError` (proxy_helpers.go). */
const isHttpError = (status: number): boolean => status < 200 || status >= 300;
/** `isRetryableStatus` (proxy_helpers.go @ebab687). */
const isRetryable = (status: number): boolean => status === 502 || status === 503 || status === 504;

interface Answer {
  status: number;
  contentType: string | null;
  text: string;
}

async function handle(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  opts: LlmdSidecarOptions,
  prefills: LlmdSidecar['prefills'],
): Promise<void> {
  const version = opts.version ?? 'ebab687';
  const decoderUrl = opts.decoderUrl;
  const path = (req.url ?? '/').split('?')[0]!;
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks);
  const original = cloneHeaders(req);
  // `r.Header.Values` then `Del`; a single value is split on commas; the first (no prefiller sampling) is trimmed.
  const values = original.has(PREFILL_ENDPOINT_HEADER) ? [original.get(PREFILL_ENDPOINT_HEADER)!] : [];
  const prefillHost = (values.length === 1 ? values[0]!.split(',') : values)[0]?.trim() ?? '';
  original.delete(PREFILL_ENDPOINT_HEADER);
  const caps = req.method === 'POST' ? pdRoutes(version)[path] : undefined;
  if (caps === undefined || prefillHost === '')
    return pipe(await send(`${decoderUrl}${req.url ?? '/'}`, req.method ?? 'GET', original, raw), res);
  const body = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
  // preq/dreq := r.Clone(ctx); Header.Add(x-request-id, uuid) on each.
  const headers = new Headers(original);
  headers.append('x-request-id', randomUUID());
  const prefillBody: Record<string, unknown> = { ...body, kv_transfer_params: { ...TOY_PROXY_PREFILL_KV }, stream: false };
  delete prefillBody['stream_options'];
  const capped =
    caps.inSamplingParams === true ? { ...((body['sampling_params'] as Record<string, unknown> | undefined) ?? {}) } : prefillBody;
  for (const f of caps.fields) capped[f] = 1;
  if (caps.inSamplingParams === true) prefillBody['sampling_params'] = capped;
  const pbody = Buffer.from(JSON.stringify(prefillBody));
  const retries = version === 'ebab687' ? (opts.prefillMaxRetries ?? 0) : 0;
  let p: Answer;
  for (let attempt = 0; ; attempt++) {
    p = await prefillOnce(`http://${prefillHost}${path}`, headers, pbody);
    prefills.push({ target: prefillHost, requestIds: splitIds(headers), status: p.status });
    if (!isHttpError(p.status) || !isRetryable(p.status) || attempt >= retries) break;
    await new Promise((r) => setTimeout(r, opts.prefillRetryBackoffMs ?? 200));
  }
  if (isHttpError(p.status)) {
    if (version === '520af478' && !(p.status >= 400 && p.status <= 451)) {
      // shouldFallbackToDecode: the original request with r's own headers (no added request id), decode-only.
      return pipe(await send(`${decoderUrl}${path}`, 'POST', original, raw), res);
    }
    res.writeHead(p.status, p.contentType === null ? {} : { 'content-type': p.contentType });
    res.end(p.text);
    return;
  }
  let params: unknown;
  try {
    params = (JSON.parse(p.text) as Record<string, unknown>)['kv_transfer_params'];
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' }); // errorJSONInvalid
    res.end(JSON.stringify({ error: 'invalid JSON from the prefiller' }));
    return;
  }
  // `completionRequest[kv_transfer_params] = pKVTransferParams`: nil (JSON null) when the prefill answer had none.
  const decodeBody = { ...body, kv_transfer_params: params ?? null };
  return pipe(await send(`${decoderUrl}${path}`, 'POST', headers, Buffer.from(JSON.stringify(decodeBody))), res);
}

/** One prefill attempt through Go's ReverseProxy: a transport failure is its default ErrorHandler's empty 502. */
async function prefillOnce(url: string, headers: Headers, body: Buffer): Promise<Answer> {
  try {
    const r = await send(url, 'POST', headers, body);
    return { status: r.status, contentType: r.headers.get('content-type'), text: await r.text() };
  } catch {
    return { status: 502, contentType: null, text: '' };
  }
}

function splitIds(headers: Headers): string[] {
  return (headers.get('x-request-id') ?? '').split(',').map((s) => s.trim());
}

/** `r.Clone`: every request header, hop-by-hop ones and the body length left to fetch. */
function cloneHeaders(req: http.IncomingMessage): Headers {
  const h = new Headers();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!.toLowerCase();
    if (['host', 'content-length', 'connection', 'transfer-encoding'].includes(name)) continue;
    h.append(name, req.rawHeaders[i + 1]!);
  }
  return h;
}

function send(url: string, method: string, headers: Headers, body: Buffer): Promise<Response> {
  return fetch(url, { method, headers, ...(method === 'GET' || method === 'HEAD' ? {} : { body }) });
}

async function pipe(from: Response, res: http.ServerResponse): Promise<void> {
  const out: Record<string, string> = {};
  from.headers.forEach((v, k) => {
    if (!['content-length', 'transfer-encoding', 'connection', 'content-encoding'].includes(k)) out[k] = v;
  });
  res.writeHead(from.status, out);
  if (from.body === null) {
    res.end();
    return;
  }
  await new Promise<void>((resolve, reject) => {
    Readable.fromWeb(from.body as import('node:stream/web').ReadableStream)
      .on('error', reject)
      .pipe(res)
      .on('finish', resolve)
      .on('error', reject);
  });
}
