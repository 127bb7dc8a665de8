/**
 * A direct protobuf encoder for the ProcessingResponse shapes the gate sends on every request: the headers, body
 * and trailers answers with header mutations (`raw_value` headers), a body mutation and `clear_route_cache`.
 * @grpc/proto-loader's serializer runs protobufjs `fromObject` over every nested message before encoding it; on the
 * gate's request path that cost about as much as the no-op server's whole answer. Anything this encoder does not
 * know (a refusal's ImmediateResponse, dynamic metadata, a streamed body, `override_message_timeout`, any other key)
 * returns undefined and goes through the generic serializer. It writes fields in field-number order, the present
 * ones only, exactly as protobufjs does, so the bytes are the same (response-encoder.test.ts compares both).
 *
 * Field numbers: envoyproxy/envoy api/envoy/service/ext_proc/v3/external_processor.proto (ProcessingResponse,
 * HeadersResponse, BodyResponse, TrailersResponse, CommonResponse, HeaderMutation, BodyMutation) and
 * api/envoy/config/core/v3/base.proto (HeaderValueOption, HeaderValue), as vendored in protos/ (protos/UPSTREAM.md).
 */
import type { WireCommonResponse, WireHeaderMutation, WireHeaderValueOption, WireProcessingResponse } from './wire.js';

/** ProcessingResponse field numbers of the answers this encoder writes. */
const ANSWER_FIELDS = {
  request_headers: 1,
  response_headers: 2,
  request_body: 3,
  response_body: 4,
  request_trailers: 5,
  response_trailers: 6,
} as const;
type AnswerKind = keyof typeof ANSWER_FIELDS;

/** HeaderValueOption.HeaderAppendAction. */
const APPEND_ACTIONS: Readonly<Record<string, number>> = {
  APPEND_IF_EXISTS_OR_ADD: 0,
  ADD_IF_ABSENT: 1,
  OVERWRITE_IF_EXISTS_OR_ADD: 2,
  OVERWRITE_IF_EXISTS: 3,
};

const LEN = 2; // wire type: length-delimited
const VARINT = 0;
const tag = (field: number, wire: number): number => (field << 3) | wire;

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** Size of a length-delimited field (tag + length + payload); every tag used here fits in one byte. */
const lenField = (payload: number): number => 1 + varintSize(payload) + payload;

/** Computed sizes of one message tree, in the order the writer visits it. */
type Sizes = number[];

function headerValueSize(h: WireHeaderValueOption['header'], sizes: Sizes): number | undefined {
  let size = 0;
  for (const k in h) if (k !== 'key' && k !== 'value' && k !== 'raw_value') return undefined;
  if (typeof h.key !== 'string') return undefined;
  size += lenField(Buffer.byteLength(h.key));
  if (h.value !== undefined && h.value !== null) size += lenField(Buffer.byteLength(h.value));
  if (h.raw_value !== undefined && h.raw_value !== null) size += lenField(h.raw_value.byteLength);
  sizes.push(size);
  return size;
}

function optionSize(o: WireHeaderValueOption, sizes: Sizes): number | undefined {
  for (const k in o) if (k !== 'header' && k !== 'append_action') return undefined;
  let size = 0;
  const slot = sizes.push(0) - 1;
  if (o.header !== undefined && o.header !== null) {
    const h = headerValueSize(o.header, sizes);
    if (h === undefined) return undefined;
    size += lenField(h);
  }
  if (o.append_action !== undefined && o.append_action !== null) {
    const action = APPEND_ACTIONS[o.append_action];
    if (action === undefined) return undefined;
    size += 1 + varintSize(action);
  }
  sizes[slot] = size;
  return size;
}

function mutationSize(m: WireHeaderMutation, sizes: Sizes): number | undefined {
  for (const k in m) if (k !== 'set_headers' && k !== 'remove_headers') return undefined;
  const slot = sizes.push(0) - 1;
  let size = 0;
  for (const o of m.set_headers ?? []) {
    const s = optionSize(o, sizes);
    if (s === undefined) return undefined;
    size += lenField(s);
  }
  for (const name of m.remove_headers ?? []) size += lenField(Buffer.byteLength(name));
  sizes[slot] = size;
  return size;
}

function commonSize(c: WireCommonResponse, sizes: Sizes): number | undefined {
  for (const k in c) if (k !== 'header_mutation' && k !== 'body_mutation' && k !== 'clear_route_cache') return undefined;
  const slot = sizes.push(0) - 1;
  let size = 0;
  if (c.header_mutation !== undefined && c.header_mutation !== null) {
    const s = mutationSize(c.header_mutation, sizes);
    if (s === undefined) return undefined;
    size += lenField(s);
  }
  if (c.body_mutation !== undefined && c.body_mutation !== null) {
    const b = c.body_mutation;
    for (const k in b) if (k !== 'body') return undefined;
    const body = b.body === undefined || b.body === null ? 0 : lenField(b.body.byteLength);
    sizes.push(body);
    size += lenField(body);
  }
  if (c.clear_route_cache !== undefined && c.clear_route_cache !== null) size += 2;
  sizes[slot] = size;
  return size;
}

class Writer {
  readonly buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  varint(n: number): void {
    while (n >= 0x80) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.pos++] = n;
  }
  len(field: number, size: number): void {
    this.buf[this.pos++] = tag(field, LEN);
    this.varint(size);
  }
  string(field: number, s: string): void {
    const n = Buffer.byteLength(s);
    this.len(field, n);
    this.pos += this.buf.write(s, this.pos, n, 'utf8');
  }
  bytes(field: number, b: Uint8Array): void {
    this.len(field, b.byteLength);
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }
}

function writeCommon(w: Writer, c: WireCommonResponse, sizes: Sizes, at: { i: number }): void {
  at.i++; // the CommonResponse's own size, already written by the caller
  if (c.header_mutation !== undefined && c.header_mutation !== null) {
    w.len(2, sizes[at.i++]!);
    for (const o of c.header_mutation.set_headers ?? []) {
      w.len(1, sizes[at.i++]!);
      if (o.header !== undefined && o.header !== null) {
        w.len(1, sizes[at.i++]!);
        w.string(1, o.header.key);
        if (o.header.value !== undefined && o.header.value !== null) w.string(2, o.header.value);
        if (o.header.raw_value !== undefined && o.header.raw_value !== null) w.bytes(3, o.header.raw_value);
      }
      if (o.append_action !== undefined && o.append_action !== null) {
        w.buf[w.pos++] = tag(3, VARINT);
        w.varint(APPEND_ACTIONS[o.append_action]!);
      }
    }
    for (const name of c.header_mutation.remove_headers ?? []) w.string(2, name);
  }
  if (c.body_mutation !== undefined && c.body_mutation !== null) {
    w.len(3, sizes[at.i++]!);
    if (c.body_mutation.body !== undefined && c.body_mutation.body !== null) w.bytes(1, c.body_mutation.body);
  }
  if (c.clear_route_cache !== undefined && c.clear_route_cache !== null) {
    w.buf[w.pos++] = tag(5, VARINT);
    w.buf[w.pos++] = c.clear_route_cache ? 1 : 0;
  }
}

/** The encoded message, or undefined when `r` has anything but one plain answer (then use the generic serializer). */
export function encodeAnswer(r: WireProcessingResponse): Buffer | undefined {
  let kind: AnswerKind | undefined;
  for (const k in r) {
    if (kind !== undefined || !(k in ANSWER_FIELDS)) return undefined;
    kind = k as AnswerKind;
  }
  if (kind === undefined) return undefined;
  const answer = r[kind] as Record<string, unknown> | undefined;
  if (answer === undefined || answer === null) return undefined;
  const trailers = kind === 'request_trailers' || kind === 'response_trailers';
  for (const k in answer) if (trailers || k !== 'response') return undefined; // trailers: only the empty answer
  const sizes: Sizes = [];
  const common = answer['response'] as WireCommonResponse | undefined | null;
  let inner = 0;
  if (common !== undefined && common !== null) {
    const s = commonSize(common, sizes);
    if (s === undefined) return undefined;
    inner = lenField(s);
  }
  const w = new Writer(lenField(inner));
  w.len(ANSWER_FIELDS[kind], inner);
  if (common !== undefined && common !== null) {
    w.len(1, sizes[0]!);
    writeCommon(w, common, sizes, { i: 0 });
  }
  return w.pos === w.buf.length ? w.buf : undefined;
}
