/**
 * A direct protobuf decoder for the ProcessingRequest messages Envoy sends on every request: the headers, body and
 * trailers messages, `observability_mode` and `protocol_config`. @grpc/proto-loader's deserializer runs protobufjs
 * `decode` and then `toObject` over every nested message (a second object per message and per header); this builds
 * the plain object once. Whatever it does not know returns undefined and goes through the generic deserializer:
 * `metadata_context`, `attributes` (both Struct trees), the deprecated per-message attributes, an unknown field or
 * enum value, a field that repeats or a second `request` member (protobufjs resolves those its own way), and any
 * message it cannot read to the end. What it returns is exactly what proto-loader returns for the same bytes with
 * the gate's loader options (protos.ts): raw field names, enums as names, no defaults for absent fields, the `request`
 * oneof named, `bytes` as Buffers over the message's own memory (request-decoder.test.ts compares both).
 *
 * Field numbers: envoyproxy/envoy api/envoy/service/ext_proc/v3/external_processor.proto (ProcessingRequest,
 * HttpHeaders, HttpBody, HttpTrailers, ProtocolConfiguration), api/envoy/config/core/v3/base.proto (HeaderMap,
 * HeaderValue) and api/envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto (BodySendMode), as vendored
 * in protos/ (protos/UPSTREAM.md).
 */
import type { BodySendMode, WireHeaderMap, WireHeaderValue, WireHttpBody, WireHttpHeaders, WireProcessingRequest } from './wire.js';

/** ProcessingRequest's `request` oneof, by field number. */
const REQUEST_KINDS = [
  undefined,
  undefined,
  'request_headers',
  'response_headers',
  'request_body',
  'response_body',
  'request_trailers',
  'response_trailers',
] as const;

/** ProcessingMode.BodySendMode, by number. */
const BODY_SEND_MODES: readonly BodySendMode[] = ['NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'];

const VARINT = 0;
const LEN = 2;

/** Thrown inside the decoder when the message needs the generic path; never escapes `decodeRequest`. */
const GENERIC = Symbol('generic');

/** A cursor over one message's bytes. Varints longer than four bytes (>= 2^28) are left to the generic decoder. */
class Cursor {
  pos: number;
  constructor(
    readonly buf: Buffer,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }

  varint(): number {
    let value = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      if (this.pos >= this.end) throw GENERIC;
      const b = this.buf[this.pos++]!;
      value |= (b & 0x7f) << shift;
      if (b < 0x80) return value;
    }
    throw GENERIC;
  }

  /** The field number of the next tag, checking its wire type. */
  field(wire: number): number {
    const t = this.varint();
    if ((t & 7) !== wire) throw GENERIC;
    return t >>> 3;
  }

  /** A length-delimited field's end, after checking it lies inside the message that holds it (which ends at `limit`). */
  lenEnd(limit: number): number {
    const n = this.varint();
    const end = this.pos + n;
    if (end > limit) throw GENERIC;
    return end;
  }

  /** After a message's fields: a varint that ran past its end is left to the generic decoder. */
  ended(end: number): void {
    if (this.pos !== end) throw GENERIC;
  }

  string(limit: number): string {
    const end = this.lenEnd(limit);
    const s = this.buf.toString('utf8', this.pos, end);
    this.pos = end;
    return s;
  }

  /** protobufjs: a slice sharing the message's memory, or a fresh empty Buffer (reader.js `bytes`). */
  bytes(limit: number): Buffer {
    const end = this.lenEnd(limit);
    const b = end === this.pos ? Buffer.alloc(0) : this.buf.subarray(this.pos, end);
    this.pos = end;
    return b;
  }

  bool(): boolean {
    return this.varint() !== 0;
  }
}

/** The wire type a known field must have; a tag with another one is left to the generic decoder. */
function wireOf(tag: number): number {
  return tag & 7;
}

function headerValue(c: Cursor, end: number): WireHeaderValue {
  const out: Partial<WireHeaderValue> = {};
  while (c.pos < end) {
    const t = c.varint();
    if (wireOf(t) !== LEN) throw GENERIC;
    switch (t >>> 3) {
      case 1:
        if (out.key !== undefined) throw GENERIC;
        out.key = c.string(end);
        break;
      case 2:
        if (out.value !== undefined) throw GENERIC;
        out.value = c.string(end);
        break;
      case 3:
        if (out.raw_value !== undefined) throw GENERIC;
        out.raw_value = c.bytes(end);
        break;
      default:
        throw GENERIC;
    }
  }
  // protobufjs reads `key` as a required-looking string, but a proto3 string may be absent: toObject then omits it.
  c.ended(end);
  return out as WireHeaderValue;
}

function headerMap(c: Cursor, end: number): WireHeaderMap {
  let headers: WireHeaderValue[] | undefined;
  while (c.pos < end) {
    if (c.field(LEN) !== 1) throw GENERIC;
    const e = c.lenEnd(end);
    headers ??= [];
    headers.push(headerValue(c, e));
  }
  c.ended(end);
  return headers === undefined ? {} : { headers };
}

function httpHeaders(c: Cursor, end: number): WireHttpHeaders {
  const out: WireHttpHeaders = {};
  while (c.pos < end) {
    const t = c.varint();
    const f = t >>> 3;
    if (f === 1 && wireOf(t) === LEN && out.headers === undefined) {
      const e = c.lenEnd(end);
      out.headers = headerMap(c, e);
    } else if (f === 3 && wireOf(t) === VARINT && out.end_of_stream === undefined) {
      out.end_of_stream = c.bool();
    } else throw GENERIC; // attributes (2, deprecated), a repeat, or an unknown field
  }
  c.ended(end);
  return out;
}

function httpBody(c: Cursor, end: number): WireHttpBody {
  const out: WireHttpBody = {};
  while (c.pos < end) {
    const t = c.varint();
    const f = t >>> 3;
    if (f === 1 && wireOf(t) === LEN && out.body === undefined) out.body = c.bytes(end);
    else if (f === 2 && wireOf(t) === VARINT && out.end_of_stream === undefined) out.end_of_stream = c.bool();
    else throw GENERIC;
  }
  c.ended(end);
  return out;
}

function httpTrailers(c: Cursor, end: number): { trailers?: WireHeaderMap } {
  const out: { trailers?: WireHeaderMap } = {};
  while (c.pos < end) {
    if (c.field(LEN) !== 1 || out.trailers !== undefined) throw GENERIC;
    const e = c.lenEnd(end);
    out.trailers = headerMap(c, e);
  }
  c.ended(end);
  return out;
}

function bodySendMode(c: Cursor): BodySendMode {
  const mode = BODY_SEND_MODES[c.varint()];
  if (mode === undefined) throw GENERIC; // protobufjs keeps an unknown enum value as its number
  return mode;
}

type ProtocolConfig = NonNullable<WireProcessingRequest['protocol_config']> & { send_body_without_waiting_for_header_response?: boolean };

function protocolConfig(c: Cursor, end: number): ProtocolConfig {
  const out: ProtocolConfig = {};
  while (c.pos < end) {
    const t = c.varint();
    if (wireOf(t) !== VARINT) throw GENERIC;
    const f = t >>> 3;
    if (f === 1 && out.request_body_mode === undefined) out.request_body_mode = bodySendMode(c);
    else if (f === 2 && out.response_body_mode === undefined) out.response_body_mode = bodySendMode(c);
    else if (f === 3 && out.send_body_without_waiting_for_header_response === undefined)
      out.send_body_without_waiting_for_header_response = c.bool();
    else throw GENERIC;
  }
  c.ended(end);
  return out;
}

function requestMember(c: Cursor, field: number, end: number): object {
  if (field <= 3) return httpHeaders(c, end);
  if (field <= 5) return httpBody(c, end);
  return httpTrailers(c, end);
}

function processingRequest(buf: Buffer): WireProcessingRequest {
  const c = new Cursor(buf, 0, buf.length);
  const out: Record<string, unknown> = {};
  let kind: (typeof REQUEST_KINDS)[number];
  let observability: boolean | undefined;
  let config: ProtocolConfig | undefined;
  while (c.pos < c.end) {
    const t = c.varint();
    const f = t >>> 3;
    if (f >= 2 && f <= 7 && wireOf(t) === LEN) {
      if (kind !== undefined) throw GENERIC; // a second member of the oneof (or the same one twice)
      kind = REQUEST_KINDS[f];
      const e = c.lenEnd(c.end);
      out[kind!] = requestMember(c, f, e);
    } else if (f === 10 && wireOf(t) === VARINT && observability === undefined) {
      observability = c.bool();
    } else if (f === 11 && wireOf(t) === LEN && config === undefined) {
      const e = c.lenEnd(c.end);
      config = protocolConfig(c, e);
    } else throw GENERIC; // metadata_context (8), attributes (9), a repeat, or an unknown field
  }
  if (observability !== undefined) out['observability_mode'] = observability;
  if (config !== undefined) out['protocol_config'] = config;
  if (kind !== undefined) out['request'] = kind;
  c.ended(c.end);
  return out as WireProcessingRequest;
}

/**
 * The message as proto-loader would decode it, or undefined when it needs the generic deserializer (see the file
 * comment). A message this decoder cannot read is left to the generic one, which reports it; only a bug here throws.
 */
export function decodeRequest(bytes: Uint8Array): WireProcessingRequest | undefined {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  try {
    return processingRequest(buf);
  } catch (e) {
    if (e === GENERIC) return undefined;
    throw e;
  }
}
