/**
 * The upstream end of the end-to-end bench: tiny HTTP/1.1 servers that read the request and answer with a fixed
 * OpenAI-style completion, bound to one port on several loopback addresses (127.0.0.2, 127.0.0.3, ...) so the
 * gate's ORIGINAL_DST endpoints are real, distinct addresses, as they are in a deployment. Nothing is recorded:
 * a bench must not grow memory with its request count.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface EchoUpstreams {
  readonly port: number;
  /** `ip:port` per loopback address served. */
  readonly addresses: readonly string[];
  close(): Promise<void>;
}

const COMPLETION = JSON.stringify({
  id: 'cmpl-bench',
  object: 'text_completion',
  model: 'llama-3-8b',
  choices: [{ index: 0, text: ' The incident was caused by an expired certificate.', finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 230, completion_tokens: 11, total_tokens: 241 },
});

function handler(req: http.IncomingMessage, res: http.ServerResponse): void {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(COMPLETION),
      'x-upstream': req.socket.localAddress ?? '',
    });
    res.end(COMPLETION);
  });
}

function listen(server: http.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
  });
}

/** Serve on `hosts` (loopback addresses), all on one port chosen by the first bind. */
export async function startEchoUpstreams(hosts: readonly string[]): Promise<EchoUpstreams> {
  const servers: http.Server[] = [];
  let port = 0;
  for (const host of hosts) {
    const server = http.createServer({ keepAlive: true }, handler);
    port = await listen(server, host, port);
    servers.push(server);
  }
  return {
    port,
    addresses: hosts.map((h) => `${h}:${port}`),
    async close() {
      for (const s of servers) s.closeAllConnections();
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}
