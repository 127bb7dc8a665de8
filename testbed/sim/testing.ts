/**
 * Helpers for tests that run simulated workers: a realistic descriptor, configs, small HTTP clients, a toy P/D
 * proxy that drives a prefill and a decode worker exactly as vLLM's `toy_proxy_server.py` does, and a Prometheus
 * text reader. Test support, not product code.
 */
import type { CompatDescriptorInput } from '../../src/compat/descriptor.js';
import { exampleDescriptorValue } from '../../src/policy/testing.js';
import { deepMerge, parseSimConfig, type SimConfig, type SimSettingsInput } from './config.js';
import { createSimServer, type SimServer, type SimServerOptions } from './server.js';

/**
 * The simulator's test worker: examples/descriptors/llama-a.yaml (Llama-3-8B geometry on vLLM 0.11, NixlConnector
 * v2) under a model, tokenizer and chat-template identity of its own, without recorded canaries. The identity is
 * fixed because the simulated tokenizer derives from it, and the sim's tests count tokens under it. Override any part.
 */
export function testDescriptor(overrides: Record<string, unknown> = {}): CompatDescriptorInput {
  const { canaries: _recorded, ...example } = exampleDescriptorValue('llama-a');
  const identity = {
    model: { id: 'acme/llama-3-8b-instruct', revision: 'rev-a', path: '/models/acme-llama-3-8b' },
    tokenizer: { id: 'acme/llama-3-8b-instruct', revision: 'tok-a' },
    chatTemplate: { id: 'acme/llama-3-8b-instruct', revision: 'tmpl-a' },
  };
  return deepMerge(deepMerge(example, identity), overrides) as CompatDescriptorInput;
}

/**
 * The prefill request's `kv_transfer_params` as vLLM's `toy_proxy_server.py` and llm-d's routing sidecar send them
 * (keep the KV for a remote decode). Written here, independently of the product's copy, because the testbed models
 * what those proxies send.
 */
export const TOY_PROXY_PREFILL_KV = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/**
 * `startTestSim` for one test file, keeping what it started so `closeAll` (given to the file's `afterEach`) closes
 * every server after each test. No vitest import here: the demo and the benches use this module too.
 */
export function simsForTests(): { sim: typeof startTestSim; closeAll(): Promise<void> } {
  const servers: SimServer[] = [];
  return {
    async sim(...args) {
      const s = await startTestSim(...args);
      servers.push(s);
      return s;
    },
    async closeAll() {
      await Promise.all(servers.splice(0).map((s) => s.close()));
    },
  };
}

/** A valid config (throws on invalid input: a test bug). */
export function testSimConfig(descriptorOverrides: Record<string, unknown> = {}, sim: SimSettingsInput = {}): SimConfig {
  const r = parseSimConfig({ descriptor: testDescriptor(descriptorOverrides), sim: { maxModelLen: 2048, numGpuBlocks: 512, ...sim } });
  if (!r.ok) throw r.error;
  return r.value;
}

export function startTestSim(
  descriptorOverrides: Record<string, unknown> = {},
  sim: SimSettingsInput = {},
  opts: SimServerOptions = {},
): Promise<SimServer> {
  return createSimServer(testSimConfig(descriptorOverrides, sim), opts);
}

export interface HttpReply {
  status: number;
  /** Parsed JSON, loosely typed on purpose: tests inspect arbitrary response shapes. */
  body: any;
  text: string;
}

export async function getJson(url: string): Promise<HttpReply> {
  const res = await fetch(url);
  const text = await res.text();
  return { status: res.status, text, body: safeJson(text) };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<HttpReply> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, body: safeJson(text) };
}

/** POST a streaming request and return the parsed `data:` events (`'[DONE]'` kept as a string). */
export async function postSse(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; events: any[] }> {
  const r = await postJson(url, body, headers);
  const events = r.text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6))
    .map((d) => (d === '[DONE]' ? d : JSON.parse(d)));
  return { status: r.status, events };
}

/**
 * vLLM's toy proxy (vllm-project/vllm tests/v1/kv_connector/nixl_integration/toy_proxy_server.py @030ea52e): P gets
 * the request with `do_remote_decode`, `max_tokens: 1` (and `max_completion_tokens: 1` when present), `stream: false`,
 * no `stream_options`, `min_tokens` or `min_completion_tokens`; D gets the ORIGINAL request plus P's
 * `kv_transfer_params` when P answered any (`if kv_transfer_params:`), else the original unchanged. Both get the same
 * X-Request-Id.
 */
export async function runDisaggregated(
  prefill: { url: string },
  decode: { url: string },
  path: '/v1/completions' | '/v1/chat/completions',
  request: Record<string, unknown>,
  headers: { prefill?: Record<string, string>; decode?: Record<string, string> } = {},
): Promise<{ prefill: HttpReply; decode: HttpReply }> {
  const requestId = `req-${Math.random().toString(16).slice(2)}`;
  const pReq: Record<string, unknown> = {
    ...request,
    kv_transfer_params: { ...TOY_PROXY_PREFILL_KV },
    stream: false,
    max_tokens: 1,
  };
  if ('max_completion_tokens' in pReq) pReq['max_completion_tokens'] = 1;
  delete pReq['stream_options'];
  delete pReq['min_tokens'];
  delete pReq['min_completion_tokens'];
  const p = await postJson(`${prefill.url}${path}`, pReq, { 'x-request-id': requestId, ...headers.prefill });
  const params: unknown = p.body?.kv_transfer_params;
  const dReq = isNonEmptyObject(params) ? { ...request, kv_transfer_params: params } : { ...request };
  const d = await postJson(`${decode.url}${path}`, dReq, { 'x-request-id': requestId, ...headers.decode });
  return { prefill: p, decode: d };
}

/** The value of one sample in Prometheus text (`labels` must all match); NaN when absent. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([^{\s]+)(\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = parseLabels(m[3] ?? '');
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[4]);
  }
  return Number.NaN;
}

export function parseLabels(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of s.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) out[m[1]!] = m[2]!;
  return out;
}

export async function scrape(server: { url: string }): Promise<string> {
  return (await fetch(`${server.url}/metrics`)).text();
}

/** Python truthiness of a decoded JSON value as the toy proxy tests it: a non-empty dict. */
function isNonEmptyObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
