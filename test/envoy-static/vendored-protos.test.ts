import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ISTIO_APPLY_TO_TYPES } from './envoy-yaml-targets.js';
import {
  importClosure,
  importsOf,
  listVendoredProtos,
  loadEnvoyRoot,
  PROTOS_DIR,
  protoIncludeDirs,
  VENDORED_ROOT_PROTOS,
} from './proto-root.js';
import { findMessageType } from './type-index.js';

const root = loadEnvoyRoot();

/** The 18 files of the ext_proc service closure that the skeleton vendored first (two carry kvgate-patch edits). */
const ORIGINAL_EIGHTEEN = [
  'envoy/annotations/deprecation.proto',
  'envoy/config/core/v3/address.proto',
  'envoy/config/core/v3/backoff.proto',
  'envoy/config/core/v3/base.proto',
  'envoy/config/core/v3/extension.proto',
  'envoy/config/core/v3/http_uri.proto',
  'envoy/config/core/v3/socket_option.proto',
  'envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto',
  'envoy/service/ext_proc/v3/external_processor.proto',
  'envoy/type/v3/http_status.proto',
  'envoy/type/v3/percent.proto',
  'envoy/type/v3/semantic_version.proto',
  'udpa/annotations/migrate.proto',
  'udpa/annotations/status.proto',
  'udpa/annotations/versioning.proto',
  'validate/validate.proto',
  'xds/annotations/v3/status.proto',
  'xds/core/v3/context_params.proto',
];

describe('vendored protos (protos/)', () => {
  it('are exactly the import closure of the root files: nothing missing, nothing extra', () => {
    const closure = importClosure(VENDORED_ROOT_PROTOS);
    expect(closure.missing).toEqual([]);
    expect(listVendoredProtos()).toEqual(closure.files);
  });

  it('still hold the 18 files of the ext_proc service, patches included', () => {
    const vendored = listVendoredProtos();
    for (const f of ORIGINAL_EIGHTEEN) expect(vendored).toContain(f);
    for (const f of [
      'envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto',
      'envoy/service/ext_proc/v3/external_processor.proto',
    ]) {
      expect(readFileSync(path.join(PROTOS_DIR, 'envoy-api', f), 'utf8')).toContain('kvgate-patch');
    }
    const bodyMode = root.lookupEnum('envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode');
    expect(bodyMode.values['FULL_DUPLEX_STREAMED']).toBe(4);
  });

  it('carry the Apache-2.0 licence of each upstream repository they come from', () => {
    for (const dir of protoIncludeDirs()) expect(existsSync(path.join(dir, 'LICENSE')), dir).toBe(true);
    expect(protoIncludeDirs().map((d) => path.relative(PROTOS_DIR, d))).toEqual(['envoy-api', 'xds', 'protoc-gen-validate']);
  });

  it('define every message kvgate YAML names: the bootstrap, its @types, and the Istio patch targets', () => {
    const names = [
      'envoy.config.bootstrap.v3.Bootstrap',
      'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
      'envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      'envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute',
      'envoy.extensions.filters.http.router.v3.Router',
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
      ...Object.values(ISTIO_APPLY_TO_TYPES),
    ];
    expect(names.filter((n) => findMessageType(root, n) === undefined)).toEqual([]);
  });

  it('parse imports in every form protoc accepts', () => {
    const src =
      'syntax = "proto3";\nimport "a/b.proto";\n  import public "c.proto";\nimport weak "d.proto";\n// import "commented.proto";\n';
    expect(importsOf(src)).toEqual(['a/b.proto', 'c.proto', 'd.proto']);
  });
});
