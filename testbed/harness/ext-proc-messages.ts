/**
 * ext_proc messages as @grpc/proto-loader hands them over with kvgate's LOADER_OPTIONS (keepCase, enums as strings,
 * longs as strings, `oneofs: true` adds the discriminator, `defaults: false` leaves unset fields absent). Decoded
 * values are untrusted server output, so every field is optional and may be `null`.
 *
 * `google.protobuf.Struct` keeps protobufjs's camelCase (`structValue`, `stringValue`) even with keepCase.
 */
import type { BodySendMode, ProcessingMode } from './envoy-config-types.js';

export interface WireHeaderValue {
  key?: string;
  value?: string;
  raw_value?: Uint8Array | null;
}

export interface WireHeaderValueOption {
  header?: WireHeaderValue | null;
  append?: { value?: boolean } | null;
  append_action?: string | number;
  keep_empty_value?: boolean;
}

export interface WireHeaderMutation {
  set_headers?: WireHeaderValueOption[];
  remove_headers?: string[];
}

export interface WireBodyMutation {
  mutation?: 'body' | 'clear_body' | 'streamed_response';
  body?: Uint8Array;
  clear_body?: boolean;
  /** The only body answer Envoy takes under FULL_DUPLEX_STREAMED (`StreamedBodyResponse`). */
  streamed_response?: { body?: Uint8Array; end_of_stream?: boolean } | null;
}

export interface WireCommonResponse {
  status?: 'CONTINUE' | 'CONTINUE_AND_REPLACE' | number;
  header_mutation?: WireHeaderMutation | null;
  body_mutation?: WireBodyMutation | null;
  clear_route_cache?: boolean;
}

export interface WireHeadersResponse {
  response?: WireCommonResponse | null;
}

export interface WireTrailersResponse {
  header_mutation?: WireHeaderMutation | null;
}

export interface WireImmediateResponse {
  status?: { code?: string | number } | null;
  headers?: WireHeaderMutation | null;
  body?: Uint8Array;
  grpc_status?: { status?: number } | null;
  details?: string;
}

export interface WireValue {
  kind?: string;
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: WireStruct | null;
  listValue?: { values?: WireValue[] } | null;
}

export interface WireStruct {
  fields?: Record<string, WireValue>;
}

export interface WireDuration {
  seconds?: string | number;
  nanos?: number;
}

export type ResponseKind =
  | 'request_headers'
  | 'response_headers'
  | 'request_body'
  | 'response_body'
  | 'request_trailers'
  | 'response_trailers'
  | 'immediate_response';

export interface WireProcessingResponse {
  response?: ResponseKind | string;
  request_headers?: WireHeadersResponse | null;
  response_headers?: WireHeadersResponse | null;
  request_body?: WireHeadersResponse | null;
  response_body?: WireHeadersResponse | null;
  request_trailers?: WireTrailersResponse | null;
  response_trailers?: WireTrailersResponse | null;
  immediate_response?: WireImmediateResponse | null;
  dynamic_metadata?: WireStruct | null;
  mode_override?: Partial<ProcessingMode> | null;
  override_message_timeout?: WireDuration | null;
}

export interface WireHeaderMap {
  headers?: Array<{ key: string; value?: string; raw_value?: Uint8Array }>;
}

export type RequestKind =
  | 'request_headers'
  | 'response_headers'
  | 'request_body'
  | 'response_body'
  | 'request_trailers'
  | 'response_trailers';

export interface WireProcessingRequest {
  request?: RequestKind;
  request_headers?: { headers?: WireHeaderMap; end_of_stream?: boolean };
  response_headers?: { headers?: WireHeaderMap; end_of_stream?: boolean };
  request_body?: { body?: Uint8Array; end_of_stream?: boolean };
  response_body?: { body?: Uint8Array; end_of_stream?: boolean };
  request_trailers?: { trailers?: WireHeaderMap };
  response_trailers?: { trailers?: WireHeaderMap };
  metadata_context?: { filter_metadata?: Record<string, WireStruct> };
  attributes?: Record<string, WireStruct>;
  protocol_config?: {
    request_body_mode?: BodySendMode;
    response_body_mode?: BodySendMode;
    send_body_without_waiting_for_header_response?: boolean;
  };
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Plain JSON to `google.protobuf.Struct` in the shape protobufjs serialises. */
export function toStruct(obj: Readonly<Record<string, unknown>>): WireStruct {
  const fields: Record<string, WireValue> = {};
  for (const [k, v] of Object.entries(obj)) fields[k] = toValue(v);
  return { fields };
}

export function toValue(v: unknown): WireValue {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  return { structValue: toStruct(v as Record<string, unknown>) };
}

/** `google.protobuf.Struct` back to plain JSON. */
export function fromStruct(s: WireStruct | null | undefined): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const [k, v] of Object.entries(s?.fields ?? {})) out[k] = fromValue(v);
  return out;
}

export function fromValue(v: WireValue | null | undefined): Json {
  if (v === null || v === undefined) return null;
  if (v.structValue !== undefined && v.structValue !== null) return fromStruct(v.structValue);
  if (v.listValue !== undefined && v.listValue !== null) return (v.listValue.values ?? []).map(fromValue);
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return null;
}

/** Present-and-not-null: how protobuf `has_field()` looks after proto-loader decoding. */
export function has<T>(v: T | null | undefined): v is T {
  return v !== undefined && v !== null;
}
