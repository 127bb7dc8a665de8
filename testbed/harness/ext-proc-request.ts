/**
 * Builds the `ProcessingRequest`s the filter sends, with Envoy's framing: `protocol_config` on the first message of
 * the stream only, request attributes on the first message of the request direction only, `metadata_context` (the
 * forwarding namespaces) on every message. Proto3 defaults (false, NONE, empty bytes) are left out, because Envoy's
 * C++ protobuf never puts them on the wire and a server must not depend on seeing them.
 */
import type { BodySendMode } from './envoy-config-types.js';
import { toStruct, type Json, type WireProcessingRequest } from './ext-proc-messages.js';
import type { HeaderMap } from './header-map.js';

/** Per-stream facts the request attributes are evaluated from. */
export interface StreamInfo {
  readonly requestId: string;
  readonly protocol: string;
  readonly sourceAddress: string;
  readonly sourcePort: number;
  readonly destinationAddress: string;
  readonly destinationPort: number;
}

export type DynamicMetadata = Map<string, Record<string, Json>>;

/** The payload of one message, before framing. */
export type Payload =
  | { kind: 'request_headers' | 'response_headers'; headers: HeaderMap; endOfStream: boolean }
  | { kind: 'request_body' | 'response_body'; body: Buffer; endOfStream: boolean }
  | { kind: 'request_trailers' | 'response_trailers'; trailers: HeaderMap };

/** `rawValue`: `send_header_raw_value` (runtime-config.ts), which header field carries the values. */
export function payloadMessage(p: Payload, rawValue = true): WireProcessingRequest {
  switch (p.kind) {
    case 'request_headers':
    case 'response_headers':
      return { [p.kind]: { headers: p.headers.toProto(rawValue), ...(p.endOfStream ? { end_of_stream: true } : {}) } };
    case 'request_body':
    case 'response_body':
      return {
        [p.kind]: { ...(p.body.length > 0 ? { body: p.body } : {}), ...(p.endOfStream ? { end_of_stream: true } : {}) },
      };
    case 'request_trailers':
    case 'response_trailers':
      return { [p.kind]: { trailers: p.trailers.toProto(rawValue) } };
  }
}

/** `ProtocolConfiguration` as Envoy fills it: both directions' current body modes. */
export function protocolConfig(
  requestMode: BodySendMode,
  responseMode: BodySendMode,
): NonNullable<WireProcessingRequest['protocol_config']> {
  return {
    ...(requestMode !== 'NONE' ? { request_body_mode: requestMode } : {}),
    ...(responseMode !== 'NONE' ? { response_body_mode: responseMode } : {}),
  };
}

/** `metadata_context.filter_metadata` for the forwarding namespaces present on the stream. */
export function forwardedMetadata(
  namespaces: readonly string[],
  metadata: DynamicMetadata,
): NonNullable<WireProcessingRequest['metadata_context']> {
  const filterMetadata: Record<string, ReturnType<typeof toStruct>> = {};
  for (const ns of namespaces) {
    const value = metadata.get(ns);
    if (value !== undefined) filterMetadata[ns] = toStruct(value);
  }
  return Object.keys(filterMetadata).length > 0 ? { filter_metadata: filterMetadata } : {};
}

/** Evaluates the configured request attributes (the subset in ext-proc-config.ts) against the request headers. */
export function requestAttributes(names: readonly string[], headers: HeaderMap, info: StreamInfo): Record<string, Json> {
  const path = headers.get(':path') ?? '';
  const values: Record<string, () => Json> = {
    'request.path': () => path,
    'request.url_path': () => path.split('?')[0] ?? '',
    'request.host': () => headers.get(':authority') ?? '',
    'request.scheme': () => headers.get(':scheme') ?? '',
    'request.method': () => headers.get(':method') ?? '',
    'request.headers': () => {
      const out: Record<string, Json> = {};
      for (const [k, v] of headers.entries()) out[k] = typeof out[k] === 'string' ? `${out[k]},${v}` : v;
      return out;
    },
    'request.referer': () => headers.get('referer') ?? '',
    'request.useragent': () => headers.get('user-agent') ?? '',
    'request.id': () => info.requestId,
    'request.protocol': () => info.protocol,
    'source.address': () => `${info.sourceAddress}:${info.sourcePort}`,
    'source.port': () => info.sourcePort,
    'destination.address': () => `${info.destinationAddress}:${info.destinationPort}`,
    'destination.port': () => info.destinationPort,
  };
  const out: Record<string, Json> = {};
  for (const name of names) {
    const get = values[name];
    if (get !== undefined) out[name] = get();
  }
  return out;
}
