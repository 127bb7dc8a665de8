/**
 * Loads every vendored Envoy proto under protos/ into one protobufjs Root, so the shipped Envoy YAML can be checked
 * against Envoy's own message definitions instead of a hand-written schema that would drift from them.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import type { Root } from 'protobufjs';

/** The repository's vendored proto folder (see protos/UPSTREAM.md). */
export const PROTOS_DIR = fileURLToPath(new URL('../../protos/', import.meta.url));

/** Include roots inside protos/, in lookup order; a folder that is absent (googleapis) is simply not searched. */
export const PROTO_INCLUDE_FOLDERS = ['envoy-api', 'xds', 'protoc-gen-validate', 'googleapis'] as const;

/** The Envoy message every bootstrap file (envoy -c envoy.yaml) is parsed as. */
export const BOOTSTRAP_TYPE = 'envoy.config.bootstrap.v3.Bootstrap';

/**
 * The files whose transitive imports are vendored (protos/UPSTREAM.md): the ext_proc service the gate serves,
 * the bootstrap, and each type kvgate's YAML names behind an `@type`. Adding an `@type` of another extension to
 * envoy/ means adding its proto here and copying the new closure (see test/envoy-static/README.md).
 */
export const VENDORED_ROOT_PROTOS: readonly string[] = [
  'envoy/service/ext_proc/v3/external_processor.proto',
  'envoy/config/bootstrap/v3/bootstrap.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/http/buffer/v3/buffer.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
];

const requireFromHere = createRequire(import.meta.url);

/** Include directories that exist, as absolute paths. */
export function protoIncludeDirs(protosDir: string = PROTOS_DIR): string[] {
  return PROTO_INCLUDE_FOLDERS.map((f) => path.join(protosDir, f)).filter((d) => existsSync(d));
}

/** Every `.proto` file under the include directories, as import paths relative to its include directory, sorted. */
export function listVendoredProtos(protosDir: string = PROTOS_DIR): string[] {
  const out: string[] = [];
  for (const dir of protoIncludeDirs(protosDir)) {
    const walk = (rel: string): void => {
      for (const name of readdirSync(path.join(dir, rel))) {
        const relPath = rel === '' ? name : `${rel}/${name}`;
        if (statSync(path.join(dir, relPath)).isDirectory()) walk(relPath);
        else if (name.endsWith('.proto')) out.push(relPath);
      }
    };
    walk('');
  }
  return out.sort();
}

/**
 * Finds an import the way protoc does with `-I` for each include directory. `google/protobuf/*` comes from
 * protobufjs itself: the bundled well-known types, and its copy of descriptor.proto for the custom options.
 */
export function resolveProtoImport(target: string, protosDir: string = PROTOS_DIR): string | undefined {
  for (const dir of protoIncludeDirs(protosDir)) {
    const candidate = path.join(dir, target);
    if (existsSync(candidate)) return candidate;
  }
  if (target.startsWith('google/protobuf/')) {
    try {
      return requireFromHere.resolve(`protobufjs/${target}`);
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * A Root holding every vendored proto, fully resolved. Field names keep Envoy's snake_case (`keepCase`), which
 * is what Envoy's YAML uses; the validator derives the lowerCamelCase JSON names itself. Throws on a missing
 * import or an unresolvable type: that is a broken vendoring, not a config error.
 */
export function loadEnvoyRoot(protosDir: string = PROTOS_DIR): Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin: string, target: string): string | null => resolveProtoImport(target, protosDir) ?? null;
  // protobufjs passes the top-level names through resolvePath too, so they are given as import paths.
  root.loadSync(listVendoredProtos(protosDir), { keepCase: true });
  root.resolveAll();
  if (root.lookup(BOOTSTRAP_TYPE) === null) throw new Error(`kvgate: ${BOOTSTRAP_TYPE} did not load from ${protosDir}`);
  return root;
}

/** The files a .proto imports (`import`, `import public`, `import weak`), in order. */
export function importsOf(source: string): string[] {
  return [...source.matchAll(/^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;/gm)].map((m) => m[1] ?? '');
}

/**
 * The transitive import closure of `roots` over protos/, without the google/protobuf well-known types (protobufjs
 * ships them). `missing` lists imports no include directory holds.
 */
export function importClosure(roots: readonly string[], protosDir: string = PROTOS_DIR): { files: string[]; missing: string[] } {
  const seen = new Set<string>();
  const missing = new Set<string>();
  const stack = [...roots];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    if (seen.has(next) || next.startsWith('google/protobuf/')) continue;
    const file = resolveProtoImport(next, protosDir);
    if (!file) {
      missing.add(next);
      continue;
    }
    seen.add(next);
    stack.push(...importsOf(readFileSync(file, 'utf8')));
  }
  return { files: [...seen].sort(), missing: [...missing].sort() };
}
