import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { userPath } from './user-path.js';

describe('userPath', () => {
  it('resolves against the directory npm was started from, else the working directory; keeps absolute paths', () => {
    expect(userPath('t.yaml', { INIT_CWD: '/home/op/cfg' })).toBe('/home/op/cfg/t.yaml');
    expect(userPath('/etc/t.yaml', { INIT_CWD: '/home/op/cfg' })).toBe('/etc/t.yaml');
    expect(userPath('t.yaml', {})).toBe(path.join(process.cwd(), 't.yaml'));
  });
});
