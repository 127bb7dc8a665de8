/**
 * Fakes for tests of the gate's admission and session: request facts as the session builds them, hooks that record
 * `override_message_timeout` requests, and a route-table file in a temporary folder that a test can rewrite.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatIssues } from '../config/issues.js';
import { clone, twoRevisionTableValue } from '../policy/testing.js';
import { type GateConfig, parseGateConfig } from './config.js';
import type { RawRequestFacts } from '../decide/decide-request.js';
import type { WaitHooks } from './admission-types.js';

export type TableValue = Record<string, any>;

/** The two-revision table with every new session on `llama-b`, whose decode endpoint takes one request. */
export function queueTableValue(mutate: (v: TableValue) => void = () => {}): TableValue {
  const v = clone(twoRevisionTableValue()) as TableValue;
  v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight: 100 };
  v['pools'][3]['maxInFlightPerEndpoint'] = 1;
  v['fallback'] = [{ queue: { deadlineMs: 2000, maxDepth: 2 } }, { refuse: { retryAfterSeconds: 7 } }];
  mutate(v);
  return v;
}

/** A chat completion as the session hands it to admission (public listener). */
export function chatFacts(requestId: string, headers: Record<string, string> = {}, body: unknown = undefined): RawRequestFacts {
  const json = body ?? { model: 'llama-3-8b', messages: [{ role: 'user', content: 'Say hello.' }] };
  return {
    requestId,
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'x-tenant-id': 'acme', 'x-session-id': `s-${requestId}`, ...headers },
    listener: 'public',
    metadata: {},
    body: new TextEncoder().encode(JSON.stringify(json)),
    bodyTruncated: false,
  };
}

/** Hooks that accept one extension and remember what was asked. */
export function recordingHooks(): WaitHooks & { readonly extended: number[] } {
  const extended: number[] = [];
  return {
    extended,
    get canExtendTimeout() {
      return extended.length === 0;
    },
    extendTimeout(ms) {
      if (extended.length > 0) return false;
      extended.push(ms);
      return true;
    },
  };
}

/** A route table file in its own temporary folder. */
export interface TableFile {
  readonly path: string;
  write(value: unknown): Promise<void>;
  writeText(text: string): Promise<void>;
  remove(): Promise<void>;
}

export async function createTableFile(value: unknown): Promise<TableFile> {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-table-'));
  const path = join(dir, 'route-table.json');
  const file: TableFile = {
    path,
    write: (v) => writeFile(path, JSON.stringify(v, null, 2)),
    writeText: (t) => writeFile(path, t),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
  await file.write(value);
  return file;
}

/** Resolve after pending microtasks and timers of the current turn have run. */
export const tick = (ms = 0): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A gate config for an in-process test gate: plaintext (`insecure`), no admin port, dev keys, a static worker view, its
 * route table `policy` next to `dir/gate.json`; `extra` replaces any top-level setting.
 */
export function localGateConfig(dir: string, policy: string, extra: Record<string, unknown> = {}): GateConfig {
  const cfg = parseGateConfig(
    JSON.stringify({
      listen: '127.0.0.1:0',
      admin: '',
      insecure: true,
      policy,
      keys: { devSeed: 'x' },
      workerView: { mode: 'static' },
      ...extra,
    }),
    join(dir, 'gate.json'),
  );
  if (!cfg.ok) throw new Error(formatIssues(cfg.error));
  return cfg.value;
}
