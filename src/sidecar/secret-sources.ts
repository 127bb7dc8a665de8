/**
 * The secrets a sidecar config names (`keys`, `workerApiKey`), checked at load beside the rest of the config, so one
 * failed start lists every file the operator must fix: the config's own issues, the descriptor file, the key file
 * and the worker's API key file together, each naming the sidecar config, the setting, the file read and a fix.
 * The command loads them again to start (`keyRingFrom`, `loadWorkerAuth`) and stays the authority; nothing here keeps
 * or reports a secret.
 */
import { access, constants } from 'node:fs/promises';
import path from 'node:path';
import type { Locate } from '../config/from-zod.js';
import { issue, type ConfigIssue } from '../config/issues.js';
import { readConfigText, readErrorReason } from '../config/read-text.js';
import { keyRingFrom, KeySourceSchema } from '../contract/key-source.js';
import { parseKeyRing } from '../contract/keys.js';
import { loadWorkerAuth, WorkerApiKeySchema } from './worker-auth.js';

/** Where the secrets are named: a config file (with lines), or the command line (the flags that set them). */
export interface SecretSourcesAt {
  readonly file: string;
  readonly locate?: Locate;
  /** The command line: name each setting by its flag. */
  readonly flags?: boolean;
  /**
   * The environment `keys.env` and `workerApiKey.env` are read from; without it only the files are checked (the
   * command passes its environment, a test that builds a config alone need not).
   */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

const FLAG_OF: Readonly<Record<string, string>> = {
  'keys.file': '--keys',
  'workerApiKey.file': '--worker-api-key-file',
  'workerApiKey.env': '--worker-api-key-env',
};

/**
 * One issue per secret the raw (not yet validated) config names that cannot be used: a key file that cannot be read
 * or is not a valid key ring, a `keys.env` variable unset or invalid, a worker API key file or variable unusable. A
 * source the schema refuses is left to the schema's own issue. Relative files are already resolved against the config
 * file's folder (`resolveRelativeKeyFile` in config.ts).
 */
export async function secretSourceIssues(raw: unknown, at: SecretSourcesAt): Promise<ConfigIssue[]> {
  const given = raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>) : {};
  const issues: ConfigIssue[] = [];
  const add = (setting: string, message: string, fix: string): void => {
    const pos = at.locate?.(setting.split('.'), true) ?? at.locate?.([setting.split('.')[0]!], true);
    const name = at.flags === true ? (FLAG_OF[setting] ?? setting) : setting;
    issues.push(issue(at.file, name, message, fix, pos ? { line: pos.line, column: pos.column } : {}));
  };
  const keys = KeySourceSchema.safeParse(given['keys']);
  if (keys.success && keys.data.file !== undefined) {
    const file = keys.data.file;
    let text: string | undefined;
    try {
      text = await readConfigText(file);
    } catch (e) {
      add(
        'keys.file',
        `cannot read the key file ${file}: ${readErrorReason(e)}`,
        `mount the key file there (the gate's key file; format: README "Key file"), or correct keys.file (relative to ${where(at)})`,
      );
    }
    const ring = text === undefined ? undefined : parseKeyRing(text, `key file ${file}`);
    if (ring !== undefined && !ring.ok)
      add(
        'keys.file',
        ring.error.reason,
        'correct the key file as the message says (format: README "Key file"); it must be the same ring as the gate\'s',
      );
  } else if (keys.success && keys.data.env !== undefined && at.env !== undefined) {
    const ring = keyRingFrom(keys.data, at.env);
    if (!ring.ok)
      add('keys.env', ring.error, `set ${keys.data.env} in the sidecar's environment to the gate's key-file JSON, or correct keys.env`);
  }
  const api = WorkerApiKeySchema.safeParse(given['workerApiKey']);
  const apiFile = api.success ? api.data.file : undefined;
  const fileFix = `mount the worker's --api-key value there (a Secret), or correct workerApiKey.file (relative to ${where(at)})`;
  let readable = true;
  if (apiFile !== undefined) {
    try {
      await access(apiFile, constants.R_OK);
    } catch (e) {
      readable = false;
      add('workerApiKey.file', `cannot read the worker API key file ${apiFile}: ${readErrorReason(e)}`, fileFix);
    }
  }
  if (api.success && readable && (apiFile !== undefined || at.env !== undefined)) {
    // Empty, or more than one line: the loader's own words.
    const auth = await loadWorkerAuth(api.data, at.env ?? {});
    if (!auth.ok)
      add(
        apiFile !== undefined ? 'workerApiKey.file' : 'workerApiKey.env',
        auth.error,
        apiFile !== undefined ? fileFix : `export the worker's --api-key value in ${api.data.env}, or correct workerApiKey.env`,
      );
  }
  return issues;
}

function where(at: SecretSourcesAt): string {
  return at.flags === true ? 'the working directory' : `the config file's folder, ${path.dirname(path.resolve(at.file))}`;
}
