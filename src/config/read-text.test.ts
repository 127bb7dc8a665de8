import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_CONFIG_BYTES, readConfigText, readErrorReason } from './read-text.js';

/** The reason a read was refused, in the words an issue carries. */
async function reason(file: string): Promise<string> {
  try {
    await readConfigText(file);
  } catch (e) {
    return readErrorReason(e);
  }
  throw new Error(`${file} was read`);
}

describe('readConfigText: what is not a configuration file', () => {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kvgate-read-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('reads a regular file, through a symbolic link too', async () => {
    await writeFile(join(dir, 'ok.yaml'), 'a: 1\n');
    await symlink(join(dir, 'ok.yaml'), join(dir, 'link.yaml'));
    expect(await readConfigText(join(dir, 'link.yaml'))).toBe('a: 1\n');
  });

  it('says what the path is instead: missing, a directory, a link loop, a path through a file', async () => {
    await mkdir(join(dir, 'dir.yaml'));
    await symlink(join(dir, 'loop-b.yaml'), join(dir, 'loop-a.yaml'));
    await symlink(join(dir, 'loop-a.yaml'), join(dir, 'loop-b.yaml'));
    expect(await reason(join(dir, 'missing.yaml'))).toBe('no such file (ENOENT)');
    expect(await reason(join(dir, 'dir.yaml'))).toBe('it is a directory, not a file (EISDIR)');
    expect(await reason(join(dir, 'loop-a.yaml'))).toBe('it is a loop of symbolic links (ELOOP)');
    expect(await reason(join(dir, 'ok.yaml', 'x.yaml'))).toBe('a part of the path is a file, not a directory (ENOTDIR)');
    expect(readErrorReason(Object.assign(new Error('x'), { code: 'EACCES' }))).toMatch(/^permission denied/);
  });

  it('refuses a FIFO or device at once (a read would wait for a writer, or never end)', async () => {
    execFileSync('mkfifo', [join(dir, 'fifo.yaml')]);
    expect(await reason(join(dir, 'fifo.yaml'))).toBe('it is not a regular file (a FIFO, socket or device)');
    expect(await reason('/dev/zero')).toBe('it is not a regular file (a FIFO, socket or device)');
  });

  it('refuses a file larger than any configuration needs, before reading it', async () => {
    await writeFile(join(dir, 'huge.yaml'), '');
    await truncate(join(dir, 'huge.yaml'), MAX_CONFIG_BYTES + 1); // sparse: no data is written
    expect(await reason(join(dir, 'huge.yaml'))).toMatch(/^it is 16777217 bytes, over the 16777216 byte limit/);
  });
});
