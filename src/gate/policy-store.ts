/**
 * The route table the gate routes by, and its hot reload. A reload parses, validates and compiles the whole file
 * first and swaps the reference in one assignment; a file that fails any check never replaces the table in use,
 * and the reason is kept for `/status`, the log and `kvgate_policy_reloads_total{result="rejected"}`.
 */
import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { CompiledRouteTable } from '../policy/compile.js';
import { formatIssues } from '../config/issues.js';
import { redeclaredInPlace } from '../policy/diff.js';
import { loadRouteTable } from '../policy/load.js';
import { readConfigText, readErrorReason } from '../config/read-text.js';

export interface ReloadResult {
  readonly ok: boolean;
  readonly version: string;
  readonly atMs: number;
  /** Formatted issues when rejected; warnings when accepted. */
  readonly message: string;
}

export interface PolicyStore {
  current(): CompiledRouteTable;
  /** Short content hash of the table in use: its file and the descriptor files it names. */
  version(): string;
  lastReload(): ReloadResult;
  /**
   * Re-read the file; swaps only if everything checks out. A call while a reload is running gets a reload that starts
   * after it (the running one may have read the file before the change that asked for this one); calls while that one
   * waits share it.
   */
  reload(reason: string): Promise<ReloadResult>;
  /** Reload when the file (or its folder entry, for editors that rename) changes. */
  watch(debounceMs?: number): void;
  /** Listeners called after a successful swap (e.g. to rebuild the worker view). */
  onSwap(fn: (table: CompiledRouteTable) => void): void;
  close(): void;
}

interface Deps {
  readonly file: string;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly now?: () => number;
  /** How a file is read (default: `readConfigText`); tests hold a read here to change the file mid-reload. */
  readonly readText?: (file: string) => Promise<string>;
}

/** Load the table once (failing loudly) and return a store that reloads it. */
export async function createPolicyStore(deps: Deps): Promise<{ ok: true; store: PolicyStore } | { ok: false; message: string }> {
  const first = await loadCompiled(deps.file, deps.readText ?? readConfigText);
  if (!first.ok) return first;
  return { ok: true, store: new FilePolicyStore(deps, first.table, first.version, first.warnings) };
}

async function loadCompiled(
  file: string,
  read: (file: string) => Promise<string>,
): Promise<{ ok: true; table: CompiledRouteTable; version: string; warnings: string } | { ok: false; message: string }> {
  let text: string;
  try {
    text = await read(file);
  } catch (e) {
    return { ok: false, message: `${file}: cannot read the route table: ${readErrorReason(e)}. Fix: check the path and its permissions` };
  }
  // The descriptor files are part of the table: a SIGHUP after editing only one of them must be a change.
  const descriptors: [string, string][] = [];
  const readText = async (f: string): Promise<string> => {
    if (f === file) return text;
    const t = await read(f);
    descriptors.push([f, t]);
    return t;
  };
  const loaded = await loadRouteTable(file, { readText });
  if (!loaded.ok) return { ok: false, message: formatIssues(loaded.error) };
  return { ok: true, table: loaded.value, version: versionOf(text, descriptors), warnings: formatIssues(loaded.value.warnings) };
}

/**
 * The table's content hash: its own text and, in the order they are named, every descriptor file it reads (a table
 * without descriptor files keeps the hash of its text alone). Only a new version is swapped in, so a version of the
 * table text alone made a changed descriptor file an "unchanged" reload, never applied.
 */
function versionOf(text: string, descriptors: readonly (readonly [string, string])[]): string {
  const h = createHash('sha256').update(text);
  for (const [f, t] of descriptors) h.update(`\0${f}\0${Buffer.byteLength(t)}\0`).update(t);
  return h.digest('hex').slice(0, 12);
}

class FilePolicyStore implements PolicyStore {
  readonly #deps: Deps;
  readonly #reloads: Counter<'result'>;
  readonly #info: Gauge<'version'>;
  readonly #swapListeners: Array<(t: CompiledRouteTable) => void> = [];
  #table: CompiledRouteTable;
  #version: string;
  #last: ReloadResult;
  /** The reload running now, and the one asked for while it runs (it reads the file again once the first is done). */
  #inFlight: Promise<ReloadResult> | undefined;
  #next: Promise<ReloadResult> | undefined;
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(deps: Deps, table: CompiledRouteTable, version: string, warnings: string) {
    this.#deps = deps;
    this.#table = table;
    this.#version = version;
    this.#last = { ok: true, version, atMs: (deps.now ?? Date.now)(), message: warnings };
    this.#reloads = new Counter({
      name: 'kvgate_policy_reloads_total',
      help: 'Route table reloads by result (applied, unchanged, rejected).',
      labelNames: ['result'] as const,
      registers: [deps.registry],
    });
    // Every result from 0, so the first rejected reload after a start shows as an increase (an alert on
    // increase(...{result="rejected"}) misses a series that first appears at 1).
    for (const result of ['applied', 'unchanged', 'rejected'] as const) this.#reloads.inc({ result }, 0);
    this.#info = new Gauge({
      name: 'kvgate_policy_info',
      help: 'The route table in use (value 1), labelled with its content hash (the table file and its descriptor files).',
      labelNames: ['version'] as const,
      registers: [deps.registry],
    });
    this.#info.set({ version }, 1);
    if (warnings) deps.logger.warn({ warnings }, 'route table loaded with warnings');
  }

  current = (): CompiledRouteTable => this.#table;
  version = (): string => this.#version;
  lastReload = (): ReloadResult => this.#last;
  onSwap(fn: (table: CompiledRouteTable) => void): void {
    this.#swapListeners.push(fn);
  }

  reload(reason: string): Promise<ReloadResult> {
    if (this.#next !== undefined) return this.#next; // not started yet: it will read the file after this call
    const running = this.#inFlight;
    if (running === undefined) return this.#start(reason);
    // Joining the running reload would lose a change it read the file too early to see (an edit during a SIGHUP
    // reload, a ConfigMap swap during a watch reload): the table in use would stay behind the file, shown as
    // current. One more reload after it reads the file as it is then.
    const after = (): Promise<ReloadResult> => {
      this.#next = undefined;
      return this.#start(reason);
    };
    this.#next = running.then(after, after);
    return this.#next;
  }

  #start(reason: string): Promise<ReloadResult> {
    const run: Promise<ReloadResult> = this.#reload(reason).finally(() => {
      if (this.#inFlight === run) this.#inFlight = undefined;
    });
    this.#inFlight = run;
    return run;
  }

  async #reload(reason: string): Promise<ReloadResult> {
    const log = this.#deps.logger.child({ policy: this.#deps.file, reason });
    const now = (this.#deps.now ?? Date.now)();
    let next: Awaited<ReturnType<typeof loadCompiled>>;
    try {
      next = await loadCompiled(this.#deps.file, this.#deps.readText ?? readConfigText);
    } catch (e) {
      // A loader bug must never take the gate down or swap in anything: treat it as a rejected file.
      next = { ok: false, message: `${this.#deps.file}: the route table could not be loaded: ${(e as Error).message}` };
    }
    if (!next.ok) {
      this.#reloads.inc({ result: 'rejected' });
      this.#last = { ok: false, version: this.#version, atMs: now, message: next.message };
      log.error({ issues: next.message, kept: this.#version }, 'route table reload rejected; keeping the table in use');
      return this.#last;
    }
    if (next.version === this.#version) {
      this.#reloads.inc({ result: 'unchanged' });
      // After a rejection the log's last word on the table was an error: say the file is good again (put back as
      // it was), or an operator watching the log still thinks the gate runs behind a broken file.
      if (!this.#last.ok) log.info({ version: next.version }, 'route table file valid again; it equals the table in use');
      this.#last = { ok: true, version: next.version, atMs: now, message: next.warnings };
      return this.#last;
    }
    const previous = this.#version;
    // A revision redeclared under the pools that serve it empties them until every worker runs the new declaration
    // (the worker view compares each sidecar's fingerprint with the table's): said loudly, in the log and in
    // /status policy.lastReload, which `kvgate status` prints. Applied all the same: the table is valid.
    const inPlace = redeclaredInPlace(this.#table, next.table);
    this.#table = next.table; // the atomic swap: requests decided from now on see the new table
    this.#version = next.version;
    this.#info.reset();
    this.#info.set({ version: next.version }, 1);
    this.#reloads.inc({ result: 'applied' });
    const message = [...inPlace, next.warnings].filter((m) => m !== '').join('\n');
    this.#last = { ok: true, version: next.version, atMs: now, message };
    for (const fn of this.#swapListeners) fn(next.table);
    if (inPlace.length > 0)
      log.warn({ from: previous, to: next.version, redeclared: inPlace }, 'route table reloaded: a revision was redeclared in place');
    // A table's warnings name its loud opt-ins (unverified endpoints, trust: declared-only, connectorMode: lenient,
    // prefixScope: shared): at warn level on every reload, as at start, so they are never lost among info lines.
    if (next.warnings) log.warn({ from: previous, to: next.version, warnings: next.warnings }, 'route table reloaded with warnings');
    else log.info({ from: previous, to: next.version }, 'route table reloaded');
    return this.#last;
  }

  watch(debounceMs = 200): void {
    if (this.#watcher) return;
    const dir = path.dirname(this.#deps.file);
    const base = path.basename(this.#deps.file);
    // Watch the folder: editors and ConfigMap updates replace the file (rename), which a file watch would miss.
    this.#watcher = watch(dir, (_event, name) => {
      if (name !== null && name !== base && !name.startsWith('..')) return;
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => {
        this.reload('file changed').catch((e: unknown) => this.#deps.logger.error({ err: e }, 'route table reload failed'));
      }, debounceMs);
    });
    this.#watcher.on('error', (e) => this.#deps.logger.error({ err: e }, 'route table watch failed; reload with SIGHUP'));
  }

  close(): void {
    clearTimeout(this.#timer);
    this.#watcher?.close();
    this.#watcher = undefined;
  }
}
