import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { parsePrometheusText, parseSampleLine, samplesNamed } from './prometheus-text.js';

const VLLM_METRICS = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",kv_cache_layout="HND",num_gpu_blocks="4096",prefix_caching_hash_algo="sha256",sliding_window="None"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 7 1700000000000
`;

describe('parsePrometheusText', () => {
  it('reads vLLM cache_config_info labels and ignores HELP/TYPE lines', () => {
    const r = parsePrometheusText(VLLM_METRICS);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const info = samplesNamed(r.value, 'vllm:cache_config_info');
    expect(info).toHaveLength(1);
    expect(info[0]!.labels).toMatchObject({ block_size: '16', cache_dtype: 'auto', kv_cache_layout: 'HND', sliding_window: 'None' });
    expect(info[0]!.value).toBe(1);
    expect(samplesNamed(r.value, 'vllm:prompt_tokens_total')[0]!.value).toBe(1234);
    const bucket = samplesNamed(r.value, 'vllm:e2e_request_latency_seconds_bucket')[0]!;
    expect(bucket.labels['le']).toBe('+Inf');
    expect(bucket.timestampMs).toBe(1700000000000);
  });

  it('keeps escaped quotes, backslashes, newlines, commas, braces and # inside label values', () => {
    const r = parseSampleLine(String.raw`x{a="say \"hi\", {ok}",b="C:\\dir\\",c="line1\nline2",d="#not a comment"} 2`);
    expect(r).toEqual({
      ok: true,
      value: { name: 'x', labels: { a: 'say "hi", {ok}', b: 'C:\\dir\\', c: 'line1\nline2', d: '#not a comment' }, value: 2 },
    });
  });

  it('accepts a trailing comma, spaces, CRLF, special values and an OpenMetrics exemplar', () => {
    const r = parsePrometheusText('a{ x = "1" , } NaN\r\nb +Inf\nc -Inf\nd{le="1"} 3 # {trace_id="abc"} 1.0\n\n');
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.map((s) => s.name)).toEqual(['a', 'b', 'c', 'd']);
    expect(r.value[0]!.labels).toEqual({ x: '1' });
    expect(Number.isNaN(r.value[0]!.value)).toBe(true);
    expect(r.value[1]!.value).toBe(Infinity);
    expect(r.value[2]!.value).toBe(-Infinity);
    expect(r.value[3]!.value).toBe(3);
  });

  it('names the line of a malformed sample', () => {
    expect(parsePrometheusText('ok 1\nbad{a="unterminated} 1\n')).toEqual({ ok: false, error: expect.objectContaining({ line: 2 }) });
    expect(parsePrometheusText('x{a="1"}\n')).toEqual({
      ok: false,
      error: expect.objectContaining({ line: 1, message: expect.stringContaining('no value') }),
    });
    expect(parsePrometheusText('x{a="1"} one\n').ok).toBe(false);
    expect(parsePrometheusText('x{a="1" b="2"} 1\n').ok).toBe(false);
    expect(parsePrometheusText('x{a="1",a="2"} 1\n').ok).toBe(false);
  });

  it('round-trips any label value written with the format escapes', () => {
    const escape = (s: string): string => s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
    fc.assert(
      fc.property(fc.string(), fc.string(), fc.integer(), (a, b, v) => {
        const r = parseSampleLine(`m{a="${escape(a)}",b="${escape(b)}"} ${v}`);
        return r.ok && r.value.labels['a'] === a && r.value.labels['b'] === b && r.value.value === v;
      }),
    );
  });
});
