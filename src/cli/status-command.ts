/**
 * `kvgate status --gate URL [--json]`: one look at a running deployment. Reads the gate's admin `/status`, then the
 * status of every sidecar the route table names (`GET <status>/kvgate/v1/status`), and prints the gate (serving,
 * route table version and last reload, the key ring's ids and last reload, streams, queues) and one row per endpoint: pool, revision, role, the gate's
 * state for it (routable, unverified, draining, stale, unreached) and why (a worker that does not match its
 * declaration named first: address, engine id, each field with both values), and what its sidecar says (verified,
 * draining, in flight / capacity). `--json` prints the same as one JSON document.
 *
 * With the key ring (`--keys FILE`, else `KVGATE_KEYS`), each sidecar is asked as the gate asks it, with a fresh nonce,
 * and its answer's signature is checked (src/contract/status-signature.ts); without, the table says it did not check.
 */
import { parseArgs } from 'node:util';
import { loadKeyRing, type KeyRing } from '../contract/keys.js';
import { newStatusNonce, verifyStatus } from '../contract/status-signature.js';
import { askSidecarStatus, type PoolState } from '../gate/worker-poller.js';

export const STATUS_USAGE = `usage: kvgate status --gate URL [--keys FILE] [--json] [--timeout-ms N]

  --gate URL        the gate's admin address, e.g. http://127.0.0.1:9003
  --keys FILE       the key file the gate and sidecars hold: check each sidecar's answer is signed by a key holder
                    (default: KVGATE_KEYS when set; otherwise signatures are not checked)
  --json            print one JSON document instead of tables
  --timeout-ms N    limit per HTTP call (default 2000)

exit status: 0 the gate answered (and, with keys, every sidecar answer that came was signed for this call);
             1 the gate did not answer; 2 bad flags or key file;
             3 with keys, a sidecar's answer failed its signature check (an impostor, or keys out of step)
`;

export interface StatusIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly fetch?: typeof fetch;
  /** Where `KVGATE_KEYS` is read (default: process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/** Whether a sidecar's answer was signed for this call, or why it could not be told. */
type SignatureView =
  | { readonly checked: true; readonly verified: true; readonly keyId: string }
  | { readonly checked: true; readonly verified: false; readonly reason: string; readonly message: string }
  | { readonly checked: false; readonly message: string };

const NOT_CHECKED = 'not checked: no keys (pass --keys FILE or set KVGATE_KEYS)';

/** The keys part of a gate's or sidecar's status (src/key-store.ts KeyStoreStatus): ids only, never a secret. */
interface KeysView {
  readonly source?: string;
  readonly reloadable?: boolean;
  readonly currentId?: string;
  readonly keyIds?: readonly string[];
  readonly lastReload?: { readonly atMs?: number; readonly result?: string; readonly reason?: string } | null;
}

interface GateStatus {
  /** The gate's kvgate version (absent from a gate older than the field). */
  readonly release?: string;
  readonly serving?: boolean;
  readonly keys?: KeysView;
  readonly policy?: { readonly file?: string; readonly version?: string; readonly lastReload?: unknown };
  readonly streams?: number;
  readonly queues?: unknown;
  readonly workerView?: { readonly mode?: string; readonly ageMs?: number | null; readonly pools?: PoolState[] | null };
  /** The loud opt-ins in use (src/gate/opt-ins.ts). */
  readonly optIns?: readonly string[];
}

interface SidecarView {
  /** The sidecar's kvgate version (absent from a sidecar older than the field). */
  readonly release?: string;
  readonly verified?: boolean;
  readonly draining?: boolean;
  readonly inFlight?: number;
  readonly capacity?: { readonly maxInFlight?: number };
  readonly reasons?: readonly string[];
  /** The sidecar's loud opt-ins (src/sidecar/opt-ins.ts). */
  readonly optIns?: readonly string[];
  readonly keys?: KeysView;
  readonly error?: string;
  /** Added by `kvgate status`: whether this answer was signed by a key holder for this call. */
  readonly signature?: SignatureView;
}

/**
 * `kvgate status ...`: 0 when the gate answered, 1 when it did not, 2 on bad flags, 3 when a sidecar's answer failed
 * its signature check (scripts and CI gates can stop on an impostor or a key rotation out of step without parsing).
 */
export async function statusCommand(
  argv: readonly string[],
  io: StatusIo = { stdout: (t) => process.stdout.write(t), stderr: (t) => process.stderr.write(t) },
): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        gate: { type: 'string' },
        json: { type: 'boolean' },
        keys: { type: 'string' },
        'timeout-ms': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }).values;
  } catch (e) {
    io.stderr(`kvgate status: ${(e as Error).message}\n${STATUS_USAGE}`);
    return 2;
  }
  if (values.help === true) {
    io.stdout(STATUS_USAGE);
    return 0;
  }
  const timeoutMs = Number(values['timeout-ms'] ?? 2000);
  if (values.gate === undefined || !Number.isInteger(timeoutMs) || timeoutMs <= 0) {
    io.stderr(`kvgate status: ${values.gate === undefined ? 'no --gate URL' : '--timeout-ms must be a positive integer'}\n${STATUS_USAGE}`);
    return 2;
  }
  const env = io.env ?? process.env;
  let keys: KeyRing | undefined;
  if (values.keys !== undefined || (env['KVGATE_KEYS'] ?? '').trim() !== '') {
    const loaded = loadKeyRing(values.keys === undefined ? { env } : { file: values.keys });
    if (!loaded.ok) {
      io.stderr(`kvgate status: ${loaded.error.reason}\n`);
      return 2;
    }
    keys = loaded.value;
  }
  const doFetch = io.fetch ?? fetch;
  const get = async (url: string): Promise<unknown> => {
    const res = await doFetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return res.json();
  };
  let gate: GateStatus;
  try {
    gate = (await get(`${values.gate.replace(/\/+$/, '')}/status`)) as GateStatus;
  } catch (e) {
    io.stderr(
      `kvgate status: the gate's admin port at ${values.gate} did not answer /status: ${(e as Error).message}; check --gate (the gate config's admin address)\n`,
    );
    return 1;
  }
  const pools = gate.workerView?.pools ?? [];
  const urls = [...new Set(pools.flatMap((p) => p.endpoints.map((e) => e.status)).filter((s): s is string => s !== null))];
  const sidecars = Object.fromEntries(
    await Promise.all(
      urls.map(async (u): Promise<[string, SidecarView]> => {
        try {
          return [u, await getSidecar(doFetch, u, timeoutMs, keys)];
        } catch (e) {
          return [u, { error: (e as Error).message }];
        }
      }),
    ),
  );
  io.stdout(values.json === true ? `${JSON.stringify({ gate, sidecars }, null, 2)}\n` : renderStatus(gate, sidecars));
  const failed = Object.entries(sidecars).filter(([, v]) => v.signature?.checked === true && !v.signature.verified);
  if (failed.length > 0) {
    io.stderr(`kvgate status: ${failed.length} sidecar answer(s) failed the signature check: ${failed.map(([u]) => u).join(', ')}\n`);
    return 3;
  }
  return 0;
}

/** A sidecar's status, asked as the gate asks it, its signature checked when `keys` are given. */
async function getSidecar(doFetch: typeof fetch, base: string, timeoutMs: number, keys: KeyRing | undefined): Promise<SidecarView> {
  const nonce = keys === undefined ? undefined : newStatusNonce();
  const answer = await askSidecarStatus(doFetch, base, timeoutMs, nonce);
  let signature: SignatureView = { checked: false, message: NOT_CHECKED };
  if (keys !== undefined && nonce !== undefined) {
    const v = verifyStatus(keys, nonce, answer.bytes, answer.signature);
    signature = v.ok
      ? { checked: true, verified: true, keyId: v.value.keyId }
      : { checked: true, verified: false, reason: v.error.reason, message: checkerMessage(v.error) };
  }
  return { ...(JSON.parse(answer.bytes.toString('utf8')) as SidecarView), signature };
}

/**
 * verifyStatus speaks as the gate that polls ("which this gate does not hold"); here the key file given to this
 * command checks the answer, and a key id missing from it says nothing about the gate's ring.
 */
function checkerMessage(e: { reason: string; message: string }): string {
  const kid = /signed with key id (\S+), which this gate does not hold/.exec(e.message)?.[1];
  if (e.reason !== 'unknown_key' || kid === undefined) return e.message;
  return `the answer is signed with key id ${kid}, which the key file given to kvgate status (--keys or KVGATE_KEYS) does not hold: pass the key file the gates and sidecars hold (the gate's own view of this sidecar is in STATE)`;
}

/** The SIGNED column: the key id a verified answer was signed with, FAILED, or that it was not checked. */
function signatureText(s: SidecarView | undefined): string {
  const sig = s?.signature;
  if (s === undefined || s.error !== undefined || sig === undefined) return '-';
  if (!sig.checked) return 'unchecked';
  return sig.verified ? `ok ${sig.keyId}` : `FAILED (${sig.reason})`;
}

/** The last reload as a sentence: the gate's /status gives `{ ok, version, atMs, message }` (policy-store.ts). */
function reloadText(r: unknown): string {
  if (r === undefined || r === null || typeof r !== 'object') return 'none';
  const { ok, version, atMs, message } = r as { ok?: unknown; version?: unknown; atMs?: unknown; message?: unknown };
  const when = typeof atMs === 'number' ? ` at ${new Date(atMs).toISOString()}` : '';
  const note = typeof message === 'string' && message.trim() !== '' ? `: ${message.trim().split('\n')[0]}` : '';
  return ok === false
    ? `REJECTED${when} (the gate kept version ${String(version ?? '?')})${note}`
    : `ok${when}, version ${String(version ?? '?')}${note === '' ? '' : ` (with warnings${note})`}`;
}

/** The key ids a process holds, current first and marked: `k2* k1`. */
function keyIdsText(k: KeysView): string {
  const ids = k.keyIds ?? [];
  return [...ids.filter((id) => id === k.currentId).map((id) => `${id}*`), ...ids.filter((id) => id !== k.currentId)].join(' ');
}

/** The gate's keys as a sentence: ids (current starred), source, whether it reloads, the last reload. */
function keysText(k: KeysView | undefined): string {
  if (k === undefined) return '?';
  const how = k.reloadable === true ? 'reloads on change or SIGHUP' : 'read at start only';
  const r = k.lastReload;
  const when = typeof r?.atMs === 'number' ? ` at ${new Date(r.atMs).toISOString()}` : '';
  const last =
    r == null ? 'none' : `${r.result === 'rejected' ? 'REJECTED' : String(r.result ?? '?')}${when}${r.reason ? ` (${r.reason})` : ''}`;
  return `${keyIdsText(k)} (keys.${k.source ?? '?'}, ${how}); last reload: ${last}`;
}

/** The queues as a sentence: `{ waiting, groups: [{ groupId, depth, oldestWaitMs }] }` (admission.ts queueStatus). */
function queuesText(q: unknown): string {
  const { waiting, groups } = (q ?? {}) as { waiting?: unknown; groups?: unknown };
  const list = Array.isArray(groups) ? (groups as { groupId?: unknown; depth?: unknown; oldestWaitMs?: unknown }[]) : [];
  if (typeof waiting !== 'number' || waiting === 0) return 'none waiting';
  const parts = list.map((g) => `${String(g.groupId)} ${String(g.depth)} (oldest ${String(g.oldestWaitMs)} ms)`);
  return `${waiting} waiting${parts.length > 0 ? `: ${parts.join(', ')}` : ''}`;
}

const UNREPORTED = 'not reported';

/**
 * kvgate releases in one line: the gate's, then each sidecar release with how many sidecars run it. During a rolling
 * upgrade (docs/operator-guide.md section 16: decode sidecars, prefill sidecars, then gates) it shows how far it got.
 */
function releasesText(gate: GateStatus, sidecars: Readonly<Record<string, SidecarView>>): string {
  const counts = new Map<string, number>();
  for (const s of Object.values(sidecars)) {
    if (s.error !== undefined) continue;
    const r = s.release ?? UNREPORTED;
    counts.set(r, (counts.get(r) ?? 0) + 1);
  }
  const list = [...counts].map(([r, n]) => `${r} x${n}`).join(', ');
  return `gate ${gate.release ?? UNREPORTED}; sidecars ${list === '' ? 'none answered' : list}`;
}

/** Why-column note for a sidecar on another release than the gate (nothing when either does not say). */
function releaseSkew(gate: GateStatus, s: SidecarView | undefined): string[] {
  if (gate.release === undefined || s === undefined || s.error !== undefined || s.release === gate.release) return [];
  if (s.release === undefined) {
    return [
      `kvgate release not reported: older than the gate's ${gate.release}; upgrade sidecars before gates (docs/operator-guide.md section 16)`,
    ];
  }
  return [`kvgate release ${s.release}, the gate runs ${gate.release} (a rolling upgrade: sidecars go first)`];
}

/** The terminal view: the gate in a few lines, then one row per endpoint. */
export function renderStatus(gate: GateStatus, sidecars: Readonly<Record<string, SidecarView>>): string {
  const out: string[] = [];
  const reload = reloadText(gate.policy?.lastReload);
  out.push(
    `gate: ${gate.serving === false ? 'DRAINING' : 'serving'}, ${gate.streams ?? 0} streams open, worker view ${gate.workerView?.mode ?? '?'} (age ${gate.workerView?.ageMs ?? '?'} ms)`,
  );
  out.push(`route table: ${gate.policy?.file ?? '?'} version ${gate.policy?.version ?? '?'}; last reload: ${reload}`);
  out.push(`keys: ${keysText(gate.keys)}`);
  out.push(`releases: ${releasesText(gate, sidecars)}`);
  out.push(`queues: ${queuesText(gate.queues)}`);
  // The settings that leave a mixed or unverified route possible, shouted: none with the safe defaults.
  const optIns = gate.optIns ?? [];
  out.push(optIns.length === 0 ? 'opt-ins: none' : `OPT-INS IN USE: ${optIns.join(', ')}`);
  const sidecarList = Object.values(sidecars).filter((s) => s.error === undefined);
  if (sidecarList.some((s) => s.signature?.checked === false)) out.push(`sidecar signatures: ${NOT_CHECKED}`);
  const rows: string[][] = [['POOL', 'REVISION', 'ROLE', 'ENDPOINT', 'STATE', 'SIDECAR', 'IN FLIGHT', 'SIGNED', 'WHY']];
  for (const p of gate.workerView?.pools ?? []) {
    for (const e of p.endpoints) {
      const s = e.status === null ? undefined : sidecars[e.status];
      const sidecar =
        s === undefined
          ? '-'
          : s.error !== undefined
            ? 'unreachable'
            : `${s.verified ? 'verified' : 'UNVERIFIED'}${s.draining ? ', draining' : ''}`;
      const load = s === undefined || s.error !== undefined ? '-' : `${s.inFlight ?? 0}/${s.capacity?.maxInFlight ?? '?'}`;
      // A worker its sidecar found lying comes first, named: address, engine id, each field with both values.
      const sidecarOptIns = s?.optIns === undefined || s.optIns.length === 0 ? [] : [`sidecar opt-ins: ${s.optIns.join(', ')}`];
      // During a key rotation: a sidecar that does not hold what the gate holds yet (confirm before the next step).
      const keysDiffer =
        s?.keys !== undefined && gate.keys !== undefined && keyIdsText(s.keys) !== keyIdsText(gate.keys)
          ? [`keys differ from the gate's: ${keyIdsText(s.keys)}`]
          : [];
      // A rolling upgrade in progress, or stuck: this sidecar runs another kvgate release than the gate.
      const release = releaseSkew(gate, s);
      // An answer no key holder signed for this call: what it says is not the sidecar's word, and the gate refuses it too.
      const badSignature = s?.signature?.checked === true && !s.signature.verified ? [`signature: ${s.signature.message}`] : [];
      const why = [
        ...badSignature,
        ...(e.named == null ? [] : [e.named]),
        ...e.reasons,
        ...(s?.error !== undefined ? [s.error] : (s?.reasons ?? [])),
        ...sidecarOptIns,
        ...keysDiffer,
        ...release,
      ]
        .filter((r, i, all) => all.indexOf(r) === i)
        .join('; ');
      rows.push([p.pool, p.revision, p.role, e.address, e.state, sidecar, load, signatureText(s), why === '' ? '-' : why]);
    }
  }
  if (gate.workerView?.pools == null) out.push('(static worker view: the gate does not poll sidecars, so no endpoint states)');
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (i === r.length - 1 ? 0 : r[i]!.length))));
  out.push('', ...rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')));
  return `${out.join('\n')}\n`;
}
