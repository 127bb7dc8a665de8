/**
 * An llm-d-style P/D sidecar for tests: what llm-d's routing sidecar does in front of a decode worker, written from
 * llm-d/llm-d-inference-scheduler `pkg/sidecar/proxy` @520af478 (`proxy.go`, `chat_completions.go`,
 * `connector_nixlv2.go`, `proxy_helpers.go`). Test support only; it never ships.
 *
 * - Routes: `POST /v1/chat/completions`, `/v1/completions` and `/v1/responses` run the P/D protocol; everything else
 *   goes to the decoder unchanged.
 * - The prefill target is the `x-prefiller-host-port` header (the scheduler's choice; a comma list takes the first),
 *   which is removed before anything is forwarded. Without it the request goes to the decoder as is.
 * - Prefill (`runNIXLProtocolV2`): the incoming request is cloned (every header, the gate's `x-request-id` and
 *   `x-kvgate-contract` included), `Header.Add("x-request-id", <uuid>)` adds a SECOND request id, and the body gets
 *   `kv_transfer_params` {do_remote_decode: true, do_remote_prefill: false, remote_*: null}, `stream: false`, no
 *   `stream_options`, and the token limit fields set to 1 (`max_tokens`/`max_completion_tokens`, or
 *   `max_output_tokens` for the Responses API). Sent straight to `http://<prefill host>` (no Envoy hop).
 * - A prefill answer of 400..451 is relayed to the client as is; any other failure falls back to decode-only with the
 *   original request (`shouldFallbackToDecode`).
 * - Decode: the original body with `stream`/`stream_options`/token limits restored and `kv_transfer_params` set to
 *   the prefill answer's, cloned headers plus the same added request id, to the decoder URL; the answer is piped back.
 *
 * Node's HTTP server joins the two `x-request-id` lines as "<gate id>, <uuid>", which is what kvgate's sidecars see.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { TOY_PROXY_PREFILL_KV } from '../sim/testing.js';

export const PREFILL_ENDPOINT_HEADER = 'x-prefiller-host-port';

const PD_PATHS: Readonly<Record<string, readonly string[]>> = {
  '/v1/chat/completions': ['max_tokens', 'max_completion_tokens'],
  '/v1/completions': ['max_tokens', 'max_completion_tokens'],
  '/v1/responses': ['max_output_tokens'],
};

export interface LlmdSidecar {
  readonly url: string;
  readonly port: number;
  /** Prefill requests sent, with the headers they carried (for assertions). */
  readonly prefills: Array<{ target: string; requestIds: string[]; status: number }>;
  close(): Promise<void>;
}

/** Start the sidecar on `host:port` (0: any free port) in front of `decoderUrl`. */
export async function startLlmdSidecar(opts: { decoderUrl: string; host?: string; port?: number }): Promise<LlmdSidecar> {
  const prefills: LlmdSidecar['prefills'] = [];
  const server = http.createServer((req, res) => {
    void handle(req, res, opts.decoderUrl, prefills).catch((e: unknown) => {
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

async function handle(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  decoderUrl: string,
  prefills: LlmdSidecar['prefills'],
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks);
  const headers = cloneHeaders(req);
  const prefillHost = (headers.get(PREFILL_ENDPOINT_HEADER) ?? '').split(',')[0]!.trim();
  headers.delete(PREFILL_ENDPOINT_HEADER);
  const limits = req.method === 'POST' ? PD_PATHS[path] : undefined;
  if (limits === undefined || prefillHost === '')
    return pipe(await send(`${decoderUrl}${req.url ?? '/'}`, req.method ?? 'GET', headers, raw), res);
  const original = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
  const uuid = randomUUID();
  headers.append('x-request-id', uuid);
  const prefillBody: Record<string, unknown> = {
    ...original,
    kv_transfer_params: { ...TOY_PROXY_PREFILL_KV },
    stream: false,
  };
  delete prefillBody['stream_options'];
  for (const f of limits) prefillBody[f] = 1;
  const p = await send(`http://${prefillHost}${path}`, 'POST', headers, Buffer.from(JSON.stringify(prefillBody)));
  const pText = await p.text();
  prefills.push({
    target: prefillHost,
    requestIds: headers
      .get('x-request-id')!
      .split(',')
      .map((s) => s.trim()),
    status: p.status,
  });
  if (p.status >= 400) {
    if (p.status <= 451) {
      res.writeHead(p.status, { 'content-type': p.headers.get('content-type') ?? 'application/json' });
      res.end(pText);
      return;
    }
    // shouldFallbackToDecode: the original request, decode-only.
    return pipe(await send(`${decoderUrl}${path}`, 'POST', headers, raw), res);
  }
  const params = (JSON.parse(pText) as Record<string, unknown>)['kv_transfer_params'];
  const decodeBody = { ...original, kv_transfer_params: params };
  return pipe(await send(`${decoderUrl}${path}`, 'POST', headers, Buffer.from(JSON.stringify(decodeBody))), res);
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
