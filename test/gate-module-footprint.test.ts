/**
 * What `kvgate gate` loads into memory before it serves anything. The gate holds one ext_proc stream per request in
 * flight, and its resident memory at 10,000 open streams is held against a bare grpc-js server's (bench/scale.ts), so a
 * module it never uses is memory every replica pays for.
 *
 * Node's bundled fetch (undici, `internal/deps/undici/undici`): on Node 22 and later an ESM `import` of `node:http`
 * builds the module's named exports, which evaluates its lazy `WebSocket`, `CloseEvent` and `MessageEvent` getters
 * (nodejs/node `lib/http.js`), and those load undici. The gate never calls fetch; its admin port reaches node:http
 * through `process.getBuiltinModule` (src/gate/admin-http.ts). `npm test` runs on Node 24, where this matters; on
 * Node 20 the import never loaded undici, so there the check holds either way.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../src/package-root.js';

/** The built modules (`npm test` builds first) a child Node loads for `kvgate gate`, as `process.moduleLoadList` names them. */
function builtinsLoadedBy(entry: string): string[] {
  const url = pathToFileURL(path.join(PACKAGE_ROOT, 'dist', 'src', entry)).href;
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `await import(${JSON.stringify(url)}); process.stdout.write(JSON.stringify(process.moduleLoadList));`],
    { encoding: 'utf8', timeout: 20_000 },
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as string[];
}

describe("the gate's module footprint", () => {
  it("loading the gate command does not load Node's bundled fetch (undici)", () => {
    const loaded = builtinsLoadedBy('cli/gate-command.js');
    expect(loaded).toContain('NativeModule http2'); // the list is the real one: grpc-js's transport is in it
    expect(loaded.filter((m) => m.includes('undici'))).toEqual([]);
  });
});
