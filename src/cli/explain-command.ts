/**
 * `kvgate explain --policy FILE --request REQ.json [...]`: a dry run of one request through the gate's decision
 * core, with the declared (static) worker view; no network. Prints every step and what the client or upstream would
 * see. Exit 0 whenever it could explain (a refusal is an answer), 1 when the route table or request file cannot be
 * used, 2 on usage errors. The logic lives in src/decide/explain*.ts; this is the shell that reads files and flags.
 */
import { H } from '../headers.js';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { readErrorReason } from '../config/read-text.js';
import { createDevKeyRing, loadKeyRing, type KeyRing } from '../contract/keys.js';
import { explainRequest } from '../decide/explain.js';
import { formatExplanation } from '../decide/explain-format.js';
import {
  createExplainQueueView,
  createExplainWorkerView,
  declaredAddresses,
  parseWorkerFlag,
  WORKER_STATES,
  type EndpointPatch,
} from '../decide/explain-view.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { checkPolicyFile, formatCheckReport } from '../policy/check-report.js';

export interface CommandIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  /** The clock (ms since epoch) bindings and contracts are checked against; default Date.now. */
  readonly now?: () => number;
}

const HELP = `usage: kvgate explain --policy FILE --request REQ.json [options]

Decides one request as the gate would (static worker view, no network) and prints each step.
  --policy FILE              the route table
  --request FILE             the JSON body a client would send
  --path PATH                default: /v1/chat/completions, or /v1/completions for a body with "prompt"
  --tenant T                 the tenant, placed where the table's tenancy.source says
  --session S                the session, in the table's session header
  --binding TOKEN            an x-kvgate-binding token a client echoes back
  --header k=v               any request header (repeatable); gate-owned headers are removed as the gate does
  --keys FILE | --dev-keys SEED   the gate's key ring (bindings and contracts verify only with the same keys)
  --worker ADDR=STATE        describe an endpoint (repeatable); STATE: ${WORKER_STATES.join(', ')}, comma-separated
  --queue-depth N            requests already waiting in the group's queue (default 0)
  --max-message-timeout-ms N Envoy's max_message_timeout (default 30000)
  --gie-headers              as the gate with envoy.gieHeaders: also show the llm-d / GIE headers and envoy.lb metadata
  --contract TOKEN           explain an internal hop (a sidecar's prefill leg) presenting this contract
  --prefill-cluster C, --prefill-endpoint E   the hop's requested prefill target
  --now MS                   the time to decide at (ms since epoch; default now)
  --allow-invalid            explain even with a table that fails the semantic checks (the gate would refuse it)
  --json                     print the explanation as JSON
`;

const OPTIONS = {
  policy: { type: 'string' },
  request: { type: 'string' },
  path: { type: 'string' },
  tenant: { type: 'string' },
  session: { type: 'string' },
  binding: { type: 'string' },
  header: { type: 'string', multiple: true },
  keys: { type: 'string' },
  'dev-keys': { type: 'string' },
  worker: { type: 'string', multiple: true },
  'queue-depth': { type: 'string' },
  'expected-wait-ms': { type: 'string' },
  'max-message-timeout-ms': { type: 'string' },
  'gie-headers': { type: 'boolean' },
  contract: { type: 'string' },
  'prefill-cluster': { type: 'string' },
  'prefill-endpoint': { type: 'string' },
  now: { type: 'string' },
  json: { type: 'boolean' },
  'allow-invalid': { type: 'boolean' },
  help: { type: 'boolean' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'];

/** Run `kvgate explain`; returns the exit code. */
export async function explainCommand(argv: readonly string[], io: CommandIo = defaultIo()): Promise<number> {
  let values: Values;
  try {
    values = parseArgs({ args: [...argv], options: OPTIONS, strict: true }).values;
  } catch (e) {
    io.err(`kvgate explain: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (values.help) {
    io.out(HELP);
    return 0;
  }
  if (values.policy === undefined || values.request === undefined) {
    io.err(`kvgate explain: --policy and --request are required\n\n${HELP}`);
    return 2;
  }
  if (values['expected-wait-ms'] !== undefined) {
    return usage(
      io,
      '--expected-wait-ms is gone: the queue no longer estimates waits from traffic history, so whether a request waits depends only on --worker states, --queue-depth and the deadlines; drop the flag',
    );
  }
  const numbers = numberFlags(values);
  if (typeof numbers === 'string') return usage(io, numbers);
  const keys = keysOf(values);
  if (typeof keys === 'string') return usage(io, keys);
  const loaded = await checkPolicyFile(values.policy, { allowInvalid: values['allow-invalid'] === true });
  if (!loaded.ok) {
    io.err(`kvgate explain: the route table cannot be used:\n${formatCheckReport(loaded.report)}`);
    return 1;
  }
  if (!loaded.report.ok) {
    io.err(
      `kvgate explain: WARNING: the gate would refuse to load this table; explaining it anyway (--allow-invalid):\n${formatCheckReport(loaded.report)}`,
    );
  }
  const table = loaded.table;
  const patches = workerPatches(values.worker ?? [], table);
  if (typeof patches === 'string') return usage(io, patches);
  let body: Buffer;
  try {
    body = await readFile(values.request);
  } catch (e) {
    io.err(
      `kvgate explain: cannot read --request ${values.request}: ${readErrorReason(e)}. Fix: give the file holding the JSON body a client would send, e.g. {"model":"llama-3-8b","messages":[{"role":"user","content":"Hello"}]}\n`,
    );
    return 1;
  }
  const headers = requestHeaders(values, table);
  if (typeof headers === 'string') return usage(io, headers);
  const explanation = explainRequest({
    table,
    keys,
    nowMs: numbers.now ?? (io.now ?? Date.now)(),
    method: 'POST',
    path: values.path ?? defaultPath(body),
    headers: headers.headers,
    metadata: headers.metadata,
    body,
    ...(values.contract === undefined ? {} : { hop: hopOf(values) }),
    view: createExplainWorkerView(table, patches),
    queue: createExplainQueueView(numbers.queueDepth ?? 0),
    maxMessageTimeoutMs: numbers.maxMessageTimeoutMs ?? 30_000,
    gieHeaders: values['gie-headers'] === true,
  });
  io.out(values.json ? `${JSON.stringify(explanation, null, 2)}\n` : formatExplanation(explanation));
  return 0;
}

function usage(io: CommandIo, message: string): number {
  io.err(`kvgate explain: ${message}\n`);
  return 2;
}

function numberFlags(v: Values): { now?: number; queueDepth?: number; maxMessageTimeoutMs?: number } | string {
  const out: Record<string, number> = {};
  const flags = [
    ['now', 'now'],
    ['queue-depth', 'queueDepth'],
    ['max-message-timeout-ms', 'maxMessageTimeoutMs'],
  ] as const;
  for (const [flag, key] of flags) {
    const raw = v[flag];
    if (raw === undefined) continue;
    if (!/^\d+$/.test(raw)) return `--${flag} must be a whole number, got ${JSON.stringify(raw)}`;
    out[key] = Number(raw);
  }
  return out;
}

function keysOf(v: Values): KeyRing | string {
  if (v.keys !== undefined && v['dev-keys'] !== undefined) return 'give --keys or --dev-keys, not both';
  if (v.keys !== undefined) {
    const r = loadKeyRing({ file: v.keys });
    return r.ok ? r.value : `--keys ${v.keys}: ${r.error.reason}`;
  }
  // Without keys, contracts and bindings are minted with a fixed dev ring; tokens from a real gate will not verify.
  return createDevKeyRing(v['dev-keys'] ?? 'kvgate-explain');
}

function workerPatches(flags: readonly string[], table: CompiledRouteTable): Map<string, EndpointPatch> | string {
  const known = declaredAddresses(table);
  const out = new Map<string, EndpointPatch>();
  for (const f of flags) {
    const p = parseWorkerFlag(f);
    if (!p.ok) return p.error;
    if (!known.has(p.value.address)) return `--worker ${p.value.address}: no pool of the route table lists this endpoint`;
    out.set(p.value.address, { ...(out.get(p.value.address) ?? {}), ...p.value.patch });
  }
  return out;
}

function requestHeaders(
  v: Values,
  table: CompiledRouteTable,
): { headers: Record<string, string>; metadata: Record<string, Record<string, unknown>> } | string {
  const headers: Record<string, string> = {};
  for (const h of v.header ?? []) {
    const i = h.indexOf('=');
    if (i <= 0) return `--header ${JSON.stringify(h)}: write name=value`;
    headers[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1);
  }
  if (v.session !== undefined) headers[table.session.header] = v.session;
  if (v.binding !== undefined) headers[H.binding] = v.binding;
  const metadata: Record<string, Record<string, unknown>> = {};
  if (v.tenant !== undefined) {
    const source = table.tenancy.source;
    if (source.header !== undefined) headers[source.header] = v.tenant;
    else metadata[source.metadata!.namespace] = nest(source.metadata!.path, v.tenant);
  }
  return { headers, metadata };
}

function nest(path: readonly string[], value: string): Record<string, unknown> {
  let cur: unknown = value;
  for (const key of [...path].reverse()) cur = { [key]: cur };
  return cur as Record<string, unknown>;
}

function hopOf(v: Values): { contract: string; prefillCluster?: string; prefillEndpoint?: string } {
  return {
    contract: v.contract!,
    ...(v['prefill-cluster'] === undefined ? {} : { prefillCluster: v['prefill-cluster'] }),
    ...(v['prefill-endpoint'] === undefined ? {} : { prefillEndpoint: v['prefill-endpoint'] }),
  };
}

function defaultPath(body: Buffer): string {
  try {
    const json = JSON.parse(body.toString('utf8')) as Record<string, unknown> | null;
    if (json !== null && typeof json === 'object' && !('messages' in json) && 'prompt' in json) return '/v1/completions';
  } catch {
    // Not JSON: the decision core refuses it with 400 whichever path it is.
  }
  return '/v1/chat/completions';
}

function defaultIo(): CommandIo {
  return { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) };
}
