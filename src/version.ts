import { readFileSync } from 'node:fs';

/**
 * The package version, read from package.json next to src/ or dist/: `kvgate --version`, and the `release` the gate's
 * `/status` and every sidecar's `/kvgate/v1/status` report, so `kvgate status` can show a rolling upgrade's skew.
 */
export const VERSION: string = (() => {
  for (const rel of ['../../package.json', '../../../package.json']) {
    try {
      return (JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as { version: string }).version;
    } catch {
      // try the next location
    }
  }
  return '0.0.0';
})();
