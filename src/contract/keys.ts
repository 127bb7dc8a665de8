/**
 * The key ring: HMAC secrets for signing kvgate tokens, by key id, plus the secret that derives cache salts.
 *
 * Several ids allow rotation: new tokens are signed with `currentId`, tokens signed with an older id still verify
 * until that id is removed from the file. Secrets never leave this module in printable form: `toJSON`,
 * `util.inspect` and every error message show key ids and byte counts only.
 */
import { readFileSync } from 'node:fs';
import { inspect } from 'node:util';
import { createHash, createSecretKey, type KeyObject } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { err, KvgateError, ok, type Result } from '../errors.js';

export interface KeyRing {
  /** The key id new tokens are signed with. */
  readonly currentId: string;
  /** The secret for a key id, or undefined when the id is unknown (a rotated-out or forged key id). */
  secret(id: string): Buffer | undefined;
  /**
   * The same secret as a node:crypto KeyObject, made once per ring, for `createHmac`: given a Buffer, Node 24's
   * createHmac builds a key object on every call, about 19 us against 4 us with this one (the gate signs two tokens
   * per request, a sidecar verifies one or two on the time to first token). Undefined for an unknown id.
   */
  macKey(id: string): KeyObject | undefined;
  /** The secret cache salts are derived from (`cache-salt.ts`); separate from the signing keys. Fixed for the ring's life
   * (derived salts are kept per ring). A key-file reload (src/key-store.ts) makes a new ring, never changes one. */
  readonly saltSecret: Buffer;
  /** `saltSecret` as a KeyObject, made once (see `macKey`). */
  readonly saltMacKey: KeyObject;
}

/** Minimum secret length: HMAC-SHA256 gains nothing from more, and anything shorter is guessable. */
export const MIN_SECRET_BYTES = 32;

/** Key ids appear inside tokens between dots, so they are restricted to URL-safe characters. */
export const KEY_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Ids that match the pattern but are refused: `__proto__` names an object's prototype, so JSON/YAML tooling, schema
 * validators (zod drops it from records) and any `obj[id]` lookup lose or misread it. `constructor` and `prototype`
 * are ordinary own data in a parsed file and in the ring (a Map), so they stay allowed.
 */
const RESERVED_KEY_IDS: ReadonlySet<string> = new Set(['__proto__']);

export interface KeyRingOptions {
  readonly keys: readonly { readonly id: string; readonly secret: Uint8Array }[];
  readonly currentId: string;
  readonly saltSecret: Uint8Array;
}

class SecretKeyRing implements KeyRing {
  readonly currentId: string;
  readonly insecure: boolean;
  readonly #secrets: ReadonlyMap<string, Buffer>;
  readonly #macKeys: ReadonlyMap<string, KeyObject>;
  readonly #salt: Buffer;
  readonly saltMacKey: KeyObject;

  constructor(opts: KeyRingOptions, insecure: boolean) {
    this.currentId = opts.currentId;
    this.insecure = insecure;
    this.#secrets = new Map(opts.keys.map((k) => [k.id, Buffer.from(k.secret)]));
    this.#macKeys = new Map([...this.#secrets].map(([id, secret]) => [id, createSecretKey(secret)]));
    this.#salt = Buffer.from(opts.saltSecret);
    this.saltMacKey = createSecretKey(this.#salt);
    Object.freeze(this);
  }

  secret(id: string): Buffer | undefined {
    const s = this.#secrets.get(id);
    return s === undefined ? undefined : Buffer.from(s);
  }

  macKey(id: string): KeyObject | undefined {
    return this.#macKeys.get(id);
  }

  get saltSecret(): Buffer {
    return Buffer.from(this.#salt);
  }

  /** Key ids known to this ring, for logs and `kvgate` status output. */
  get keyIds(): string[] {
    return [...this.#secrets.keys()];
  }

  toJSON(): Record<string, unknown> {
    return { currentId: this.currentId, keyIds: this.keyIds, secrets: '[redacted]', insecure: this.insecure };
  }

  [inspect.custom](): string {
    return `KeyRing { currentId: ${this.currentId}, keyIds: [${this.keyIds.join(', ')}], secrets: [redacted]${this.insecure ? ', INSECURE dev keys' : ''} }`;
  }

  toString(): string {
    return this[inspect.custom]();
  }
}

function keyRingIssues(opts: KeyRingOptions): string[] {
  const issues: string[] = [];
  if (opts.keys.length === 0) issues.push('keys: at least one signing key is required; add one (32+ random bytes, base64)');
  const seen = new Set<string>();
  for (const k of opts.keys) {
    if (!KEY_ID_PATTERN.test(k.id)) {
      issues.push(`keys: key id ${JSON.stringify(k.id.slice(0, 64))} must be 1-64 characters of A-Z a-z 0-9 _ -; rename it`);
    } else if (RESERVED_KEY_IDS.has(k.id)) {
      issues.push(
        `keys: key id ${JSON.stringify(k.id)} is not allowed (it names a JavaScript object's prototype, which parsers and tools drop); rename it`,
      );
    }
    if (seen.has(k.id)) issues.push(`keys.${k.id}: duplicate key id; give each key its own id`);
    seen.add(k.id);
    if (k.secret.length < MIN_SECRET_BYTES) {
      issues.push(
        `keys.${k.id}: secret is ${k.secret.length} bytes, at least ${MIN_SECRET_BYTES} are required; ` +
          'generate one with `openssl rand -base64 32`',
      );
    }
  }
  if (!seen.has(opts.currentId)) {
    issues.push(
      `current: key id ${JSON.stringify(opts.currentId.slice(0, 64))} is not among the keys; set it to one of [${[...seen].join(', ')}]`,
    );
  }
  if (opts.saltSecret.length < MIN_SECRET_BYTES) {
    issues.push(
      `salt: cache-salt secret is ${opts.saltSecret.length} bytes, at least ${MIN_SECRET_BYTES} are required; ` +
        'generate one with `openssl rand -base64 32`',
    );
  } else {
    // The salt secret must be separate (docs/security.md): every cache_salt is an HMAC under it over text that ends
    // with the client's own cache_salt, written into request bodies the workers see. Under a signing key that
    // would hand out HMACs of partly client-chosen text made with the key that signs contracts.
    const salt = Buffer.from(opts.saltSecret);
    for (const k of opts.keys.filter((k) => salt.equals(Buffer.from(k.secret)))) {
      issues.push(
        `salt: is the same secret as signing key ${k.id}; the cache-salt secret must be separate from every signing key: ` +
          'generate a new one for salt with `openssl rand -base64 32`',
      );
    }
  }
  return issues;
}

/** Build a key ring from typed secrets. Throws a KvgateError listing every problem (no secret bytes included). */
export function createKeyRing(opts: KeyRingOptions): KeyRing {
  const issues = keyRingIssues(opts);
  if (issues.length > 0) throw new KvgateError('internal', `invalid key ring: ${issues.join('; ')}`);
  return new SecretKeyRing(opts, false);
}

/** The key ids a ring holds, in file order (ids are not secret: logs, `/status` and metrics show them). */
export function keyRingIds(keys: KeyRing): string[] {
  return keys instanceof SecretKeyRing ? keys.keyIds : [keys.currentId];
}

/** True for rings from `createDevKeyRing`; the gate should log a loud warning when serving with one. */
export function isInsecureKeyRing(keys: KeyRing): boolean {
  return keys instanceof SecretKeyRing && keys.insecure;
}

/**
 * A deterministic key ring derived from a seed, for the demo and tests only. INSECURE: anyone who knows the seed
 * can mint contracts. Key id `dev-insecure`.
 */
export function createDevKeyRing(seed: string): KeyRing {
  const derive = (label: string): Buffer => createHash('sha256').update(`kvgate insecure dev key\n${label}\n${seed}`).digest();
  return new SecretKeyRing(
    { keys: [{ id: 'dev-insecure', secret: derive('sign') }], currentId: 'dev-insecure', saltSecret: derive('salt') },
    true,
  );
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2,3})?$|^[A-Za-z0-9_-]+$/;

const KeyFileSchema = z
  .object(
    {
      current: z.string({ error: 'must be the id of the key that signs new tokens, e.g. "k2"' }),
      // A Map, not z.record: zod leaves a "__proto__" entry out of a record (unchecked), so such a key id would vanish
      // and the operator read "at least one signing key is required". Every id the file names is kept and checked.
      keys: z.preprocess(
        (v) => (isPlainObject(v) ? new Map(Object.entries(v)) : v),
        z.map(z.string(), z.string({ error: 'must be a base64 string of at least 32 random bytes' }), {
          error: 'must map key ids to base64 secrets, e.g. { "k1": "<base64>" }',
        }),
      ),
      salt: z.string({ error: 'must be a base64 string of at least 32 random bytes (the cache-salt secret)' }),
    },
    { error: 'must be an object { "current": "k1", "keys": { "k1": "<base64>" }, "salt": "<base64>" }' },
  )
  .strict();

/** A parsed JSON/YAML mapping (the YAML parser keeps a "__proto__" key as own data of one). */
function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function decodeSecret(value: string, path: string, issues: string[]): Buffer {
  const trimmed = value.trim();
  if (trimmed === '' || !BASE64.test(trimmed)) {
    issues.push(`${path}: is not valid base64; generate one with \`openssl rand -base64 32\``);
    return Buffer.alloc(0);
  }
  return Buffer.from(trimmed, trimmed.includes('-') || trimmed.includes('_') ? 'base64url' : 'base64');
}

/**
 * Where and what the YAML parser found wrong, from its error code and position only: its message quotes the lines
 * around the problem, which in a key file are secrets.
 */
function syntaxWhere(e: unknown): string {
  const { code, linePos } = e as { code?: unknown; linePos?: readonly { line: number; col: number }[] };
  if (typeof code !== 'string') return '';
  const at = linePos?.[0] === undefined ? '' : ` at line ${linePos[0].line}, column ${linePos[0].col}`;
  const what = code === 'DUPLICATE_KEY' ? 'a key appears twice (each key id and field once)' : code;
  return ` (${what}${at})`;
}

/**
 * Parse key-file text (JSON or YAML: `{ current, keys: { id: base64 }, salt: base64 }`). `source` names where the
 * text came from in error messages. Errors list every problem with its path and fix, never a secret.
 */
export function parseKeyRing(text: string, source: string): Result<KeyRing, KvgateError> {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    return err(
      new KvgateError(
        'internal',
        `${source}: not valid JSON or YAML${syntaxWhere(e)}; expected { "current": "k1", "keys": { "k1": "<base64>" }, "salt": "<base64>" }`,
      ),
    );
  }
  const parsed = KeyFileSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const path = i.path.map(String).join('.') || '(root)';
      const fix = i.code === 'unrecognized_keys' ? `unknown field(s) ${i.keys.join(', ')}; allowed: current, keys, salt` : i.message;
      return `${path}: ${fix}`;
    });
    return err(new KvgateError('internal', `${source}: invalid key file: ${lines.join('; ')}`));
  }
  const issues: string[] = [];
  const keys = [...parsed.data.keys].map(([id, b64]) => ({ id, secret: decodeSecret(b64, `keys.${id}`, issues) }));
  const saltSecret = decodeSecret(parsed.data.salt, 'salt', issues);
  const opts = { keys, currentId: parsed.data.current, saltSecret };
  // A secret that is not base64 was reported once already; do not report its (zero) length again.
  const undecodable = issues.map((i) => i.slice(0, i.indexOf(':') + 1));
  issues.push(...keyRingIssues(opts).filter((i) => !undecodable.some((prefix) => i.startsWith(prefix))));
  if (issues.length > 0) return err(new KvgateError('internal', `${source}: invalid key file: ${issues.join('; ')}`));
  return ok(new SecretKeyRing(opts, false));
}

/** Where `loadKeyRing` looks: a key file path, else the `KVGATE_KEYS` variable of `env`. */
export interface LoadKeyRingOptions {
  readonly file?: string;
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/** Load the key ring from a JSON/YAML key file (at start, and on every reload: src/key-store.ts), or from `KVGATE_KEYS` (the same JSON) when no file is given. */
export function loadKeyRing(opts: LoadKeyRingOptions): Result<KeyRing, KvgateError> {
  if (opts.file !== undefined) {
    let text: string;
    try {
      text = readFileSync(opts.file, 'utf8');
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? 'error';
      return err(new KvgateError('internal', `key file ${opts.file}: cannot be read (${code}); check the path and its permissions`));
    }
    return parseKeyRing(text, `key file ${opts.file}`);
  }
  const fromEnv = opts.env?.['KVGATE_KEYS'];
  if (fromEnv === undefined || fromEnv.trim() === '') {
    return err(
      new KvgateError(
        'internal',
        'no signing keys: pass a key file or set KVGATE_KEYS to {"current":"k1","keys":{"k1":"<base64>"},"salt":"<base64>"} ' +
          '(secrets of 32+ random bytes, e.g. `openssl rand -base64 32`)',
      ),
    );
  }
  return parseKeyRing(fromEnv, 'KVGATE_KEYS');
}
