import { describe, expect, it } from 'vitest';
import { classifyEvent, SseSplitter, sseErrorFrames } from './sse.js';

describe('SseSplitter', () => {
  it('splits events across arbitrary chunk boundaries and CRLF', () => {
    const s = new SseSplitter();
    expect(s.push('data: {"a"')).toEqual([]);
    expect(s.push(':1}\n\nda')).toEqual(['{"a":1}']);
    expect(s.push('ta: x\r\n\r\n: comment\n\ndata: [DONE]\n\n')).toEqual(['x', '[DONE]']);
  });

  it('reads a CRLF split between two chunks as one line end, not as the blank line that ends an event', () => {
    const s = new SseSplitter();
    expect(s.push('data: a\r')).toEqual([]);
    expect(s.push('\ndata: b\r\n\r')).toEqual(['a\nb']);
    expect(s.push('\ndata: c\r')).toEqual([]);
    expect(s.push('\r')).toEqual(['c']);
  });

  it('finds a blank line split between two chunks after a long event that did not end', () => {
    const s = new SseSplitter();
    const long = 'x'.repeat(1 << 16);
    expect(s.push(`data: ${long}`)).toEqual([]);
    for (let i = 0; i < 16; i++) expect(s.push(long)).toEqual([]);
    expect(s.push('\n')).toEqual([]);
    expect(s.push('\ndata: next\n\n')).toEqual([long.repeat(17), 'next']);
  });
});

describe('classifyEvent', () => {
  it('tells output, nothing, errors and the end apart', () => {
    expect(classifyEvent('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}').kind).toBe('empty');
    expect(classifyEvent('{"choices":[{"index":0,"delta":{"content":"Hi"}}]}').kind).toBe('token');
    expect(classifyEvent('{"choices":[{"index":0,"text":" the","finish_reason":null}]}').kind).toBe('token');
    expect(classifyEvent('{"choices":[],"usage":{"prompt_tokens":3}}').kind).toBe('empty');
    expect(classifyEvent('{"choices":[{"index":0,"text":"","finish_reason":"error"}]}').kind).toBe('error');
    expect(classifyEvent('{"error":{"message":"NIXL transfer failure: handshake_failed","code":500}}')).toEqual({
      kind: 'error',
      message: 'NIXL transfer failure: handshake_failed',
    });
    expect(classifyEvent('[DONE]').kind).toBe('done');
    expect(classifyEvent('not json').kind).toBe('empty');
  });

  it('counts a reasoning delta as output under either field name, so the relay never holds it back', () => {
    expect(classifyEvent('{"choices":[{"index":0,"delta":{"reasoning":"Let me think"}}]}').kind).toBe('token');
    expect(classifyEvent('{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think"}}]}').kind).toBe('token');
    expect(classifyEvent('{"choices":[{"index":0,"delta":{"reasoning":""}}]}').kind).toBe('empty');
  });

  it('error frames end with [DONE]', () => {
    expect(sseErrorFrames({ error: { code: 'x' } })).toBe('data: {"error":{"code":"x"}}\n\ndata: [DONE]\n\n');
  });
});
