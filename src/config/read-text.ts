/**
 * Reading a configuration file (route table, descriptor, gate or sidecar config) as text, refusing what is not one:
 * a directory, a FIFO or device (a read that would block a reload forever, or never end), a file larger than any
 * configuration needs. Errors say what the path is and what to do, and keep the errno code.
 */
import { readFile, stat } from 'node:fs/promises';

/** Far above any real route table (a ConfigMap holds at most 1 MiB); below what would strain the process. */
export const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

/** The file's UTF-8 text; throws an `Error` whose message says why not (see `readErrorReason`). */
export async function readConfigText(file: string): Promise<string> {
  // stat first: reading a FIFO with no writer would wait for one, holding a reload (and every reload asked for after
  // it) forever, and a device such as /dev/zero never ends. stat follows links, as the read does.
  const st = await stat(file);
  if (st.isDirectory()) throw Object.assign(new Error('EISDIR'), { code: 'EISDIR' });
  if (!st.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'ENOTREGULAR' });
  if (st.size > MAX_CONFIG_BYTES) throw Object.assign(new Error('too large'), { code: 'EFBIG', size: st.size });
  return readFile(file, 'utf8');
}

/** Why a file could not be read, in words an operator can act on (the errno code kept in parentheses). */
export function readErrorReason(e: unknown): string {
  const x = e as (NodeJS.ErrnoException & { size?: number }) | undefined;
  switch (x?.code) {
    case 'ENOENT':
      return 'no such file (ENOENT)';
    case 'EISDIR':
      return 'it is a directory, not a file (EISDIR)';
    case 'ELOOP':
      return 'it is a loop of symbolic links (ELOOP)';
    case 'EACCES':
    case 'EPERM':
      return `permission denied: this process's user cannot read it (${x.code})`;
    case 'ENOTDIR':
      return 'a part of the path is a file, not a directory (ENOTDIR)';
    case 'ENOTREGULAR':
      return 'it is not a regular file (a FIFO, socket or device)';
    case 'EFBIG':
      return `it is ${x.size ?? 'more than'} bytes, over the ${MAX_CONFIG_BYTES} byte limit for a configuration file (EFBIG)`;
    default:
      return x?.code ?? (e instanceof Error ? e.message : String(e));
  }
}
