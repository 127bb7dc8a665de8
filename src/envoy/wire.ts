/**
 * Shapes of the ext_proc messages as @grpc/proto-loader decodes and encodes them (keepCase, enums as strings,
 * oneofs named by their field). Only the fields kvgate reads or writes are typed. This is the only file that
 * describes Envoy's wire format; everything else in src/envoy/ builds on it.
 */

export interface WireHeaderValue {
  key: string;
  /** Set by kvgate only for an Envoy whose `send_header_raw_value` guard is off (headers.ts `inValueField`); both together is a 500. */
  value?: string;
  raw_value?: Uint8Array;
}

export interface WireHeaderMap {
  headers?: WireHeaderValue[];
}

export interface WireHttpHeaders {
  headers?: WireHeaderMap;
  end_of_stream?: boolean;
}

export interface WireHttpBody {
  body?: Uint8Array;
  end_of_stream?: boolean;
}

export interface WireStruct {
  fields?: Record<string, WireValue>;
}

export interface WireValue {
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: WireStruct;
  listValue?: { values?: WireValue[] };
  kind?: string;
}

export type BodySendMode = 'NONE' | 'STREAMED' | 'BUFFERED' | 'BUFFERED_PARTIAL' | 'FULL_DUPLEX_STREAMED' | 'GRPC';

export interface WireProcessingRequest {
  request?: 'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers';
  request_headers?: WireHttpHeaders;
  response_headers?: WireHttpHeaders;
  request_body?: WireHttpBody;
  response_body?: WireHttpBody;
  request_trailers?: { trailers?: WireHeaderMap };
  response_trailers?: { trailers?: WireHeaderMap };
  metadata_context?: { filter_metadata?: Record<string, WireStruct> };
  observability_mode?: boolean;
  protocol_config?: { request_body_mode?: BodySendMode; response_body_mode?: BodySendMode };
}

export type AppendAction = 'APPEND_IF_EXISTS_OR_ADD' | 'ADD_IF_ABSENT' | 'OVERWRITE_IF_EXISTS_OR_ADD' | 'OVERWRITE_IF_EXISTS';

export interface WireHeaderValueOption {
  header: WireHeaderValue;
  append_action?: AppendAction;
}

export interface WireHeaderMutation {
  set_headers?: WireHeaderValueOption[];
  remove_headers?: string[];
}

export interface WireCommonResponse {
  status?: 'CONTINUE' | 'CONTINUE_AND_REPLACE';
  header_mutation?: WireHeaderMutation;
  body_mutation?: { body?: Uint8Array; clear_body?: boolean; streamed_response?: { body?: Uint8Array; end_of_stream?: boolean } };
  clear_route_cache?: boolean;
}

export interface WireImmediateResponse {
  status: { code: number };
  headers?: WireHeaderMutation;
  body?: Uint8Array;
  details?: string;
}

export interface WireProcessingResponse {
  request_headers?: { response?: WireCommonResponse };
  response_headers?: { response?: WireCommonResponse };
  request_body?: { response?: WireCommonResponse };
  response_body?: { response?: WireCommonResponse };
  request_trailers?: { header_mutation?: WireHeaderMutation };
  response_trailers?: { header_mutation?: WireHeaderMutation };
  immediate_response?: WireImmediateResponse;
  dynamic_metadata?: WireStruct;
  override_message_timeout?: { seconds?: string | number; nanos?: number };
}
