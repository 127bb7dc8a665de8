/**
 * The installed package's root folder (the one holding protos/, envoy/ and examples/), found the same way from
 * src/*.ts under vitest and from dist/src/*.js at run time.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE_ROOT: string = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(path.join(dir, 'package.json')) && existsSync(path.join(dir, 'protos', 'UPSTREAM.md'))) return dir;
    dir = path.dirname(dir);
  }
  throw new Error('kvgate: cannot find the package root (the folder with package.json and protos/)');
})();
