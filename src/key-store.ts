/**
 * The key ring a gate or sidecar signs and verifies with, and its hot reload (docs/operator-guide.md section 8).
 *
 * A ring is immutable; a reload builds a whole new one with `loadKeyRing` (the same parse and checks as at start)
 * and swaps the reference in one assignment. Callers take `current()` once per request and use that snapshot for
 * everything the request signs and verifies, so a request never mixes two rings. Every cache keyed by a ring (the
 * derived cache salts, cache-salt.ts; the reused bindings, binding.ts) is per ring object, so a new salt or a
 * removed key id can never be served from the old ring's cache. An `unchanged` reload keeps the ring object (and
 * with it those caches).
 *
 * A reload is refused, keeping the ring in use, when the file does not load, or when a key id the ring in use holds
 * maps to another secret in the file: every other replica still signs and verifies that id with the old secret, so
 * the swap would break verification across the fleet. Only a `keys.file` source reloads; `keys.env` and
 * `keys.devSeed` are fixed for the life of the process.
 *
 * Nothing here logs, counts or reports a secret: key ids, the file path and the loader's messages (which never
 * include secret bytes, keys.ts) only.
 */
import { statSync, watch, type FSWatcher } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { KeySource } from './contract/key-source.js';
import { keyRingIds, loadKeyRing, type KeyRing } from './contract/keys.js';

/** Where the keys came from; `injected`: handed in by the embedding code (tests, the demo) with no key source configured. */
export type KeySourceKind = 'file' | 'env' | 'devSeed' | 'injected';
export type KeyReloadOutcome = 'applied' | 'unchanged' | 'rejected';

/** The last reload: when, what asked for it, how it ended and why (ids and file paths only). */
export interface KeyReloadResult {
  readonly atMs: number;
  readonly trigger: string;
  readonly result: KeyReloadOutcome;
  /** Why a reload was rejected, or what an applied one changed; empty for `unchanged`. */
  readonly reason: string;
}

/** What `/status` shows of the keys: never a secret. */
export interface KeyStoreStatus {
  readonly source: KeySourceKind;
  /** The key file, for a `file` source. */
  readonly file?: string;
  /** False for `env`, `devSeed` and `injected`: those keys are fixed for the life of the process (restart to change them). */
  readonly reloadable: boolean;
  readonly currentId: string;
  readonly keyIds: readonly string[];
  /** Null until the first reload (the ring in use is the one loaded at start). */
  readonly lastReload: KeyReloadResult | null;
}

export interface KeyStore {
  /** The ring in use: take it once per request and use that snapshot for the whole request. No I/O, no allocation. */
  current(): KeyRing;
  status(): KeyStoreStatus;
  /**
   * Read the key file again and swap if it loads and is compatible with the ring in use (see the module comment).
   * For a source that cannot reload, logs that once per call and changes nothing (no metric).
   */
  reload(trigger: string): KeyReloadResult;
  /** Reload when the key file (or its folder entry: an editor's rename, a Kubernetes Secret's `..data` swap) changes. */
  watch(debounceMs?: number): void;
  close(): void;
}

export interface KeyStoreDeps {
  /** The configured source (`keys` of the gate or sidecar config); only a `file` source reloads. */
  readonly source: KeySource | undefined;
  /** The ring loaded at start (by the command, which refuses to start without one). */
  readonly initial: KeyRing;
  readonly logger: Logger;
  readonly registry: Registry;
  /** Metric name prefix of the process: `kvgate_` on the gate, `kvgate_sidecar_` on a sidecar. */
  readonly metricPrefix: 'kvgate_' | 'kvgate_sidecar_';
  readonly now?: () => number;
}

export function keySourceKind(source: KeySource | undefined): KeySourceKind {
  if (source === undefined) return 'injected';
  return source.file !== undefined ? 'file' : source.env !== undefined ? 'env' : 'devSeed';
}

export function createKeyStore(deps: KeyStoreDeps): KeyStore {
  return new ReloadingKeyStore(deps);
}

/**
 * Why `next` must not replace `current`, or undefined when it may: a key id both hold with different secrets.
 * Compared by value (both are this process's own secrets; the result is a yes/no and the ids).
 */
export function incompatibleKeyIds(current: KeyRing, next: KeyRing): string[] {
  const ids = new Set(keyRingIds(next));
  return keyRingIds(current).filter((id) => {
    if (!ids.has(id)) return false;
    const a = current.secret(id);
    const b = next.secret(id);
    return a === undefined || b === undefined || !a.equals(b);
  });
}

function sameRing(a: KeyRing, b: KeyRing): boolean {
  const ia = keyRingIds(a);
  const ib = keyRingIds(b);
  return (
    a.currentId === b.currentId &&
    ia.length === ib.length &&
    ia.every((id) => ib.includes(id)) &&
    incompatibleKeyIds(a, b).length === 0 &&
    a.saltSecret.equals(b.saltSecret)
  );
}

/** A key file holds a few ids and secrets: far below this. */
const MAX_KEY_FILE_BYTES = 1024 * 1024;

/** Why `file` must not be read (a FIFO, socket or device, or oversized), or undefined (read it; errors are the loader's). */
function notARegularFile(file: string): string | undefined {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(file); // follows links, as the read does (a Kubernetes Secret's keys.json is a link into ..data)
  } catch {
    return undefined;
  }
  if (st.isDirectory()) return undefined; // the loader's EISDIR message
  if (!st.isFile()) return 'it is not a regular file (a FIFO, socket or device)';
  if (st.size > MAX_KEY_FILE_BYTES) return `it is ${st.size} bytes, over the ${MAX_KEY_FILE_BYTES} byte limit for a key file`;
  return undefined;
}

class ReloadingKeyStore implements KeyStore {
  readonly #deps: KeyStoreDeps;
  readonly #kind: KeySourceKind;
  readonly #reloads: Counter<'result'>;
  readonly #loaded: Gauge<'key_id' | 'current'>;
  #ring: KeyRing;
  #last: KeyReloadResult | null = null;
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(deps: KeyStoreDeps) {
    this.#deps = deps;
    this.#kind = keySourceKind(deps.source);
    this.#ring = deps.initial;
    const p = deps.metricPrefix;
    this.#reloads = new Counter({
      name: `${p}keys_reloads_total`,
      help: 'Key ring reloads (key file change or SIGHUP) by result (applied, unchanged, rejected); a rejected reload keeps the ring in use.',
      labelNames: ['result'] as const,
      registers: [deps.registry],
    });
    for (const result of ['applied', 'unchanged', 'rejected'] as const) this.#reloads.inc({ result }, 0);
    this.#loaded = new Gauge({
      name: `${p}keys_loaded`,
      help: 'One series (value 1) per key id in the ring in use; current="true" on the id new tokens are signed with. Check every replica holds a new id before switching current to it.',
      labelNames: ['key_id', 'current'] as const,
      registers: [deps.registry],
    });
    this.#publish();
  }

  current = (): KeyRing => this.#ring;

  status(): KeyStoreStatus {
    const file = this.#deps.source?.file;
    return {
      source: this.#kind,
      ...(file === undefined ? {} : { file }),
      reloadable: this.#kind === 'file',
      currentId: this.#ring.currentId,
      keyIds: keyRingIds(this.#ring),
      lastReload: this.#last,
    };
  }

  reload(trigger: string): KeyReloadResult {
    const file = this.#deps.source?.file;
    const atMs = (this.#deps.now ?? Date.now)();
    const log = this.#deps.logger;
    if (file === undefined) {
      const what = this.#kind === 'injected' ? 'keys given at start' : `keys.${this.#kind}`;
      log.info(
        { event: 'keys_not_reloadable', trigger, source: this.#kind },
        `${what}: read at start only; restart the process to change the keys (only keys.file reloads)`,
      );
      return { atMs, trigger, result: 'unchanged', reason: `${what} cannot be reloaded; restart to change them` };
    }
    const reject = (reason: string): KeyReloadResult => {
      this.#reloads.inc({ result: 'rejected' });
      this.#last = { atMs, trigger, result: 'rejected', reason };
      log.error(
        { event: 'keys_reload_rejected', trigger, file, reason, kept: { currentId: this.#ring.currentId, keyIds: keyRingIds(this.#ring) } },
        'key ring reload rejected; keeping the ring in use',
      );
      return this.#last;
    };
    // The loader reads synchronously: a FIFO with no writer (or a device) at the path would block this process, and
    // every request it serves, forever. Only a regular file of a sane size is read; the loader reports anything else.
    const unreadable = notARegularFile(file);
    if (unreadable !== undefined) return reject(`key file ${file}: ${unreadable}; point keys.file at the key file itself`);
    let loaded: ReturnType<typeof loadKeyRing>;
    try {
      loaded = loadKeyRing({ file });
    } catch (e) {
      // A loader bug must never take the process down or swap anything in; its message is not shown (it might quote the file).
      return reject(`key file ${file}: could not be loaded (${(e as Error).name}); fix the file and reload`);
    }
    if (!loaded.ok) return reject(`${loaded.error.reason}; fix the file and reload (the ring in use is kept)`);
    const next = loaded.value;
    const previous = this.#ring;
    const changed = incompatibleKeyIds(previous, next);
    if (changed.length > 0) {
      return reject(
        `key file ${file}: key id(s) ${changed.join(', ')} now map to a different secret than the one in use; other gates and sidecars ` +
          'still sign and verify those ids with the old secret, so this would break verification across the fleet. ' +
          'Restore the old secret under that id and add the new secret under a new id instead, then switch current to it ' +
          '(docs/operator-guide.md section 8)',
      );
    }
    if (sameRing(previous, next)) {
      this.#reloads.inc({ result: 'unchanged' });
      this.#last = { atMs, trigger, result: 'unchanged', reason: '' };
      return this.#last;
    }
    const saltChanged = !previous.saltSecret.equals(next.saltSecret);
    this.#ring = next; // the atomic swap: requests that start from now on sign and verify with the new ring
    this.#publish();
    this.#reloads.inc({ result: 'applied' });
    const before = keyRingIds(previous);
    const after = keyRingIds(next);
    const added = after.filter((id) => !before.includes(id));
    const removed = before.filter((id) => !after.includes(id));
    const parts = [
      ...(added.length > 0 ? [`added ${added.join(', ')}`] : []),
      ...(removed.length > 0 ? [`removed ${removed.join(', ')}`] : []),
      ...(previous.currentId !== next.currentId ? [`current ${previous.currentId} -> ${next.currentId}`] : []),
      ...(saltChanged ? ['salt changed'] : []),
    ];
    this.#last = { atMs, trigger, result: 'applied', reason: parts.join('; ') };
    log.info(
      { event: 'keys_reloaded', trigger, file, currentId: next.currentId, keyIds: after, added, removed, saltChanged },
      'key ring reloaded',
    );
    if (saltChanged) {
      log.warn(
        { event: 'keys_salt_changed', trigger, file },
        'the cache-salt secret changed: every cache_salt is derived anew, so prefix caches start cold (a performance dip, no correctness risk)',
      );
    }
    return this.#last;
  }

  watch(debounceMs = 200): void {
    const file = this.#deps.source?.file;
    if (this.#watcher !== undefined || file === undefined) return;
    const dir = path.dirname(file);
    const base = path.basename(file);
    // The folder, not the file: editors replace the file (rename), and a Kubernetes Secret or ConfigMap volume swaps
    // its `..data` link, which a watch on the file (or the link) would miss.
    try {
      this.#watcher = watch(dir, (_event, name) => {
        if (name !== null && name !== base && !name.startsWith('..')) return;
        clearTimeout(this.#timer);
        this.#timer = setTimeout(() => {
          try {
            this.reload('file changed');
          } catch (e) {
            this.#deps.logger.error({ err: e }, 'key ring reload failed');
          }
        }, debounceMs);
      });
    } catch (e) {
      this.#deps.logger.error({ event: 'keys_watch_failed', err: e, dir }, 'cannot watch the key file folder; reload the keys with SIGHUP');
      return;
    }
    this.#watcher.on('error', (e) =>
      this.#deps.logger.error({ event: 'keys_watch_failed', err: e, dir }, 'key file watch failed; reload the keys with SIGHUP'),
    );
  }

  close(): void {
    clearTimeout(this.#timer);
    this.#watcher?.close();
    this.#watcher = undefined;
  }

  #publish(): void {
    this.#loaded.reset();
    for (const id of keyRingIds(this.#ring)) this.#loaded.set({ key_id: id, current: String(id === this.#ring.currentId) }, 1);
  }
}
