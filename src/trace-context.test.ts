import { trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { parentContext, parseTraceparent, traceHeaders } from './trace-context.js';

const TID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SID = '00f067aa0ba902b7';

describe('W3C traceparent', () => {
  it('reads a version 00 header (the spec example) with its sampled flag and tracestate', () => {
    const sc = parseTraceparent(`00-${TID}-${SID}-01`, 'congo=t61rcWkgMzE');
    expect(sc).toMatchObject({ traceId: TID, spanId: SID, traceFlags: 1, isRemote: true });
    expect(sc!.traceState!.get('congo')).toBe('t61rcWkgMzE');
  });
  it('refuses what the spec calls invalid: version ff, zero ids, wrong lengths or case, extra fields on 00', () => {
    for (const bad of [
      `ff-${TID}-${SID}-01`,
      `00-${'0'.repeat(32)}-${SID}-01`,
      `00-${TID}-${'0'.repeat(16)}-01`,
      `00-${TID.slice(1)}-${SID}-01`,
      `00-${TID.toUpperCase()}-${SID}-01`,
      `00-${TID}-${SID}-01-extra`,
      'garbage',
    ]) {
      expect(parseTraceparent(bad), bad).toBeUndefined();
    }
  });
  it('reads a future version by its first four fields', () => {
    expect(parseTraceparent(`01-${TID}-${SID}-01-whatever`)).toMatchObject({ traceId: TID, spanId: SID });
  });
  it('round-trips: the header written for a span names that span', () => {
    const span = trace.wrapSpanContext({ traceId: TID, spanId: SID, traceFlags: 1 });
    expect(traceHeaders(span)).toEqual({ traceparent: `00-${TID}-${SID}-01` });
    expect(trace.getSpanContext(parentContext(traceHeaders(span)))).toMatchObject({ traceId: TID, spanId: SID });
    expect(trace.getSpanContext(parentContext({}))).toBeUndefined();
  });
});
