/**
 * Paths typed on a testbed command line. `npm run testbed -- ...` runs in the package root whatever directory npm
 * was started from, and npm passes that directory as INIT_CWD (npm docs, "scripts": "INIT_CWD"), so a relative path
 * is resolved against it: `cd my-config && npm run testbed -- demo --policy table.yaml` reads my-config/table.yaml.
 */
import path from 'node:path';

/** `p` as an absolute path, relative to where the user ran npm (or the working directory when run directly). */
export function userPath(p: string, env: Readonly<Record<string, string | undefined>> = process.env): string {
  return path.resolve(env['INIT_CWD'] ?? process.cwd(), p);
}
