import { readFileSync } from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from './package-root.js';

/**
 * The package version, from the package root's package.json (found the same way from src/ under vitest and from
 * dist/src/ at run time): `kvgate --version`, `kvgate_build_info`, and the `release` the gate's `/status` and every
 * sidecar's `/kvgate/v1/status` report, so `kvgate status` can show a rolling upgrade's skew.
 */
export const VERSION: string = (JSON.parse(readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
