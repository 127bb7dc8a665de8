/**
 * Test support for sidecar tests: sidecars wired to simulated workers, a contract minter, a fetch spy and an
 * in-memory log sink. Not used by product code.
 */
import { EventEmitter } from 'node:events';
import type http from 'node:http';
import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';
import { Registry } from 'prom-client';
import type { CompatDescriptorInput } from '../compat/descriptor.js';
import { groupIdOf } from '../compat/fingerprint.js';
import { cacheSaltDigestOf, promptDigestOf } from '../contract/body-binding.js';
import { mintContract, type TransferContract } from '../contract/contract.js';
import { createDevKeyRing, type KeyRing } from '../contract/keys.js';
import type { SimSettingsInput } from '../../testbed/sim/config.js';
import { simCanaryDigests } from '../../testbed/sim/recorded-canaries.js';
import { restartSimOnSamePorts } from '../../testbed/sim/restart.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { sidecarCommand } from './command.js';
import { CHAT_TEMPLATE_CANARY_MESSAGES, GENERATION_CANARY_PROMPT, TOKENIZER_CANARY_TEXT } from './canaries.js';
import { ENGINE_CANARY_REQUEST_PREFIX } from './engine-canary.js';
import { parseSidecarConfig, type SidecarConfig, type SidecarConfigInput } from './config.js';
import type { FetchFn } from './http-io.js';
import { createSidecar, type Sidecar, type SidecarDeps } from './server.js';
import { sendStatus, statusNonceOf } from './status-answer.js';

export const TEST_KEYS: KeyRing = createDevKeyRing('kvgate-sidecar-tests');

/**
 * Answer a status poll as a sidecar holding `keys` does (status-answer.ts): `body` signed for the poll's nonce, or
 * unsigned when none was sent. For HTTP servers that stand in for sidecars in tests (a bad nonce gets a 400).
 */
export function answerStatus(req: http.IncomingMessage, res: http.ServerResponse, body: unknown, keys: KeyRing): void {
  const polled = statusNonceOf(req.headers);
  if ('error' in polled) {
    res.writeHead(400, { 'content-type': 'text/plain' }).end(`${polled.error.reason}\n`);
    return;
  }
  sendStatus(res, body, keys, polled.nonce);
}

/** Every call a sidecar made through its fetch, with a way to make the next calls fail or change. */
export interface FetchSpy {
  readonly fetch: FetchFn;
  readonly calls: { url: string; method: string; headers: Record<string, string>; body: unknown }[];
  /** Calls whose URL starts with `prefix`, except probes (probe endpoints and the engine canary). */
  workCalls(prefix: string): FetchSpy['calls'];
  /** Rewrite the next matching call's headers (e.g. add `x-sim-fault`) before it is sent. */
  onNext(match: (url: string) => boolean, edit: (headers: Record<string, string>) => void): void;
  /**
   * Answer the next matching call with `status` and this JSON body instead of sending it: a worker answer the
   * simulator never gives (vLLM's validation errors quote the request they refused, prompt included).
   */
  answerNext(match: (url: string) => boolean, status: number, body: unknown): void;
  reset(): void;
}

const PROBE_PATHS = ['/version', '/v1/models', '/metrics'];

/** A probe's canary call (tokenizer, chat template, generation): part of verification, not of serving a request. */
function isCanaryProbe(body: unknown): boolean {
  const b = (body ?? {}) as Record<string, unknown>;
  return (
    b['prompt'] === GENERATION_CANARY_PROMPT ||
    b['prompt'] === TOKENIZER_CANARY_TEXT ||
    JSON.stringify(b['messages']) === JSON.stringify(CHAT_TEMPLATE_CANARY_MESSAGES)
  );
}

export function createFetchSpy(): FetchSpy {
  const calls: FetchSpy['calls'] = [];
  const edits: { match: (url: string) => boolean; edit: (h: Record<string, string>) => void }[] = [];
  const answers: { match: (url: string) => boolean; status: number; body: unknown }[] = [];
  const spy: FetchSpy = {
    calls,
    fetch: async (url, init) => {
      const headers = { ...((init?.headers ?? {}) as Record<string, string>) };
      const i = edits.findIndex((e) => e.match(url));
      if (i >= 0) edits.splice(i, 1)[0]!.edit(headers);
      const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as unknown) : undefined;
      calls.push({ url, method: init?.method ?? 'GET', headers, body });
      const a = answers.findIndex((x) => x.match(url));
      if (a >= 0) {
        const { status, body: answer } = answers.splice(a, 1)[0]!;
        return new Response(JSON.stringify(answer), { status, headers: { 'content-type': 'application/json' } });
      }
      return fetch(url, { ...init, headers });
    },
    workCalls: (prefix) =>
      calls.filter(
        (c) =>
          c.url.startsWith(prefix) &&
          !PROBE_PATHS.some((p) => c.url.split('?')[0] === `${prefix}${p}`) &&
          !(c.headers['x-request-id'] ?? '').startsWith(ENGINE_CANARY_REQUEST_PREFIX) &&
          !isCanaryProbe(c.body),
      ),
    onNext: (match, edit) => {
      edits.push({ match, edit });
    },
    answerNext: (match, status, body) => {
      answers.push({ match, status, body });
    },
    reset: () => {
      calls.length = 0;
    },
  };
  return spy;
}

/** A pino destination that keeps every JSON log line, parsed, in `lines` (any number of loggers may share it). */
export function jsonLineSink(): { lines: Array<Record<string, any>>; sink: Writable } {
  const lines: Array<Record<string, any>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, any>);
      done();
    },
  });
  return { lines, sink };
}

/** A pino logger writing JSON lines into `lines`, so tests can assert on log fields. */
export function createMemoryLogger(level = 'debug'): { logger: Logger; lines: Record<string, unknown>[] } {
  const { lines, sink } = jsonLineSink();
  return { logger: pino({ level }, sink), lines };
}

const recorded = new Map<string, Promise<Awaited<ReturnType<typeof simCanaryDigests>>>>();

/**
 * The declaration with its canary digests recorded, as an operator records them: from an honest simulator of exactly
 * that declaration (never from the worker under test, which may lie). Cached per declaration.
 */
export async function withRecordedCanaries(descriptor: CompatDescriptorInput): Promise<CompatDescriptorInput> {
  if (descriptor.canaries !== undefined) return descriptor;
  const key = JSON.stringify(descriptor);
  if (!recorded.has(key)) recorded.set(key, simCanaryDigests(descriptor));
  return { ...descriptor, canaries: await recorded.get(key)! };
}

/**
 * A config for a sidecar in front of `sim`, declaring `descriptor` (default: what the sim declares) with its canaries
 * recorded from an honest simulator of that declaration (the default `trust: recorded` needs them).
 */
export async function sidecarConfigFor(
  sim: SimServer,
  role: 'prefill' | 'decode',
  overrides: Partial<SidecarConfigInput> & { descriptor?: CompatDescriptorInput } = {},
): Promise<SidecarConfig> {
  const declared = (overrides.descriptor ?? sim.config.descriptor) as CompatDescriptorInput;
  const descriptor = overrides.trust === 'declared-only' ? declared : await withRecordedCanaries(declared);
  const raw = {
    role,
    worker: sim.url,
    listen: '127.0.0.1:0',
    admin: '127.0.0.1:0',
    metrics: '127.0.0.1:0',
    keys: { devSeed: 'kvgate-sidecar-tests' },
    probe: { intervalMs: 60_000, timeoutMs: 2_000 },
    prefill: { via: 'direct', maxAttempts: 3, backoffMs: 1, maxBackoffMs: 5, timeoutMs: 10_000 },
    // The sim serves vLLM's ZMQ side channel; a sidecar of a vLLM with a handshake hash must read it.
    nixlSideChannel: `127.0.0.1:${sim.nixlSideChannelPort}`,
    ...overrides,
    descriptor,
  };
  const r = parseSidecarConfig(raw, 'test');
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value;
}

export interface TestSidecar {
  readonly sidecar: Sidecar;
  readonly spy: FetchSpy;
  readonly registry: Registry;
  readonly lines: Record<string, unknown>[];
  readonly config: SidecarConfig;
}

export async function startTestSidecar(
  configOrPromise: SidecarConfig | Promise<SidecarConfig>,
  now?: () => number,
  /** Wraps the spy's fetch (a test that must hold or rewrite some upstream answers). */
  wrap?: (fetchFn: FetchFn) => FetchFn,
  /** More of the sidecar's dependencies (e.g. a small replay guard, the ring a key file gave). */
  more: Partial<Pick<SidecarDeps, 'replayGuardMaxEntries' | 'keys' | 'keyWatchDebounceMs' | 'firstRequestTimeoutMs'>> = {},
): Promise<TestSidecar> {
  const config = await configOrPromise;
  const spy = createFetchSpy();
  const registry = new Registry();
  const { logger, lines } = createMemoryLogger();
  const sidecar = await createSidecar(config, {
    logger,
    registry,
    fetch: wrap === undefined ? spy.fetch : wrap(spy.fetch),
    ...(now === undefined ? {} : { now }),
    ...more,
    keys: more.keys ?? TEST_KEYS,
  });
  return { sidecar, spy, registry, lines, config };
}

/** Contract fields for `fingerprint` with a prefill leg to `prefillEndpoint` (null: no disaggregation). */
export function contractFor(
  fingerprint: string,
  prefillEndpoint: string | null,
  edit: Partial<Omit<TransferContract, 'kind'>> = {},
  nowMs = Date.now(),
): Omit<TransferContract, 'kind'> {
  const tenantScope = edit.tenantScope ?? 'tenant:acme';
  return {
    requestId: 'req-1',
    groupId: groupIdOf(edit.fingerprint ?? fingerprint, tenantScope),
    fingerprint,
    tenantScope,
    tenant: 'acme',
    model: 'llama',
    revision: 'rev-a',
    adapter: null,
    // Placeholders: `bound` fills both from the body a test sends; a contract sent with `gateHeaders` alone binds none.
    cacheSaltDigest: '0'.repeat(64),
    promptDigest: '0'.repeat(64),
    issuedAtMs: nowMs,
    expiresAtMs: nowMs + 60_000,
    decode: { cluster: 'decode-a', endpoint: null },
    prefill: prefillEndpoint === null ? null : { cluster: 'prefill-a', endpoint: prefillEndpoint },
    ...edit,
  };
}

/** Headers a gate would stamp for `contract`. */
export function gateHeaders(contract: Omit<TransferContract, 'kind'>, keys: KeyRing = TEST_KEYS): Record<string, string> {
  return { 'x-request-id': contract.requestId, 'x-kvgate-contract': mintContract(contract, keys), 'x-kvgate-group': contract.groupId };
}

/** The cache_salt a gate would have written into a test body (any non-empty value works: the contract binds its digest). */
export const TEST_SALT = 'c2FsdC1mb3ItdGVzdHMtdGVuYW50LWFjbWU';

/**
 * A body and the gate headers for it, as the gate forwards them: the body gets `cache_salt` (TEST_SALT unless it has
 * one) and the contract binds that salt, the body's model and its prompt. Spread into `postJson(url, ...bound(c, b))`.
 */
export function bound(
  contract: Omit<TransferContract, 'kind'>,
  body: Record<string, unknown>,
  keys: KeyRing = TEST_KEYS,
): [Record<string, unknown>, Record<string, string>] {
  const salted = { ...body, cache_salt: typeof body['cache_salt'] === 'string' ? body['cache_salt'] : TEST_SALT };
  const fields = {
    ...contract,
    model: typeof body['model'] === 'string' ? body['model'] : contract.model,
    cacheSaltDigest: cacheSaltDigestOf(salted.cache_salt),
    promptDigest: promptDigestOf(salted),
  };
  return [salted, gateHeaders(fields, keys)];
}

/** `host:port` of a URL, as a contract names endpoints. */
export function endpointOf(url: string): string {
  return new URL(url).host;
}

/** Stop `old` and start another simulated vLLM on the same ports with `sim` overrides (see testbed/sim/restart.ts). */
export async function restartSimInPlace(old: SimServer, sim: SimSettingsInput = {}): Promise<SimServer> {
  return restartSimOnSamePorts(old, sim);
}

/** `kvgate sidecar` run in-process by a test: its signals come from `signals`, its output collects in `output()`. */
export interface CommandRun {
  /** The sidecar's URL once it listens. */
  readonly url: string;
  readonly signals: EventEmitter;
  /** The command's exit code, once it ends (send SIGTERM on `signals`). */
  readonly exit: Promise<number>;
  output(): string;
}

/** Start `kvgate sidecar ...argv` in-process; rejects with its output when it exits before it listens. */
export async function runSidecarCommand(argv: readonly string[]): Promise<CommandRun> {
  const signals = new EventEmitter();
  let ready: (url: string) => void = () => undefined;
  const listening = new Promise<string>((r) => (ready = r));
  let out = '';
  const exit = sidecarCommand(argv, {
    signals: signals as unknown as NodeJS.Process,
    stdout: (s) => (out += s),
    stderr: (s) => (out += s),
    env: {},
    onReady: ready,
  });
  const url = await Promise.race([listening, exit.then((code) => Promise.reject(new Error(`the sidecar exited ${code}: ${out}`)))]);
  return { url, signals, exit, output: () => out };
}
