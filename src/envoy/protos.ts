/**
 * Loads the vendored Envoy ext_proc protos (protos/, see protos/UPSTREAM.md) with @grpc/proto-loader.
 * The only module that knows where the .proto files live; everything gRPC-facing asks it for definitions.
 */
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PACKAGE_ROOT } from '../package-root.js';

/** Options every loader in kvgate uses: raw field names, enums as strings, oneof discriminators. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
};

export const PROTO_ROOT = path.join(PACKAGE_ROOT, 'protos');
export const PROTO_INCLUDE_DIRS = ['envoy-api', 'xds', 'protoc-gen-validate'].map((d) => path.join(PROTO_ROOT, d));

export const EXT_PROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';
export const EXT_PROC_METHOD = `/${EXT_PROC_SERVICE}/Process`;

let cached: grpc.GrpcObject | undefined;

/** The loaded ext_proc package tree (cached: loading parses 18 files). */
export function loadExtProc(): grpc.GrpcObject {
  cached ??= grpc.loadPackageDefinition(
    protoLoader.loadSync('envoy/service/ext_proc/v3/external_processor.proto', {
      ...LOADER_OPTIONS,
      includeDirs: PROTO_INCLUDE_DIRS,
    }),
  );
  return cached;
}

/** The ExternalProcessor service definition, for `server.addService` and client constructors. */
export function extProcService(): grpc.ServiceDefinition {
  const ctor = lookup(loadExtProc(), EXT_PROC_SERVICE) as grpc.ServiceClientConstructor;
  return ctor.service;
}

/** A client constructor for the ExternalProcessor service (used by the harness and benchmarks). */
export function extProcClientConstructor(): grpc.ServiceClientConstructor {
  return lookup(loadExtProc(), EXT_PROC_SERVICE) as grpc.ServiceClientConstructor;
}

function lookup(root: grpc.GrpcObject, dotted: string): unknown {
  let node: unknown = root;
  for (const part of dotted.split('.')) node = (node as Record<string, unknown>)[part];
  if (node === undefined) throw new Error(`kvgate: ${dotted} not found in the loaded protos`);
  return node;
}
