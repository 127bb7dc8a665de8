import { describe, expect, it } from 'vitest';
import { failedTransfersIn, judgeRise, TransferWatch } from './transfer-watch.js';

describe('failedTransfersIn', () => {
  it("sums vLLM's failed-transfer counter over engines, and is undefined where the worker has none", () => {
    const text = [
      '# TYPE vllm:nixl_num_failed_transfers_total counter',
      'vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} 2',
      'vllm:nixl_num_failed_transfers_total{engine="1",model_name="m"} 1',
      '',
    ].join('\n');
    expect(failedTransfersIn(text)).toBe(3);
    expect(failedTransfersIn('vllm:nixl_num_failed_transfers{engine="0"} 4\n')).toBe(4);
    expect(failedTransfersIn('vllm:num_requests_running 0\n')).toBeUndefined();
  });
});

describe('TransferWatch and judgeRise', () => {
  it('pins a rise on a transfer only when no other transfer overlapped its window', () => {
    const watch = new TransferWatch();
    const a = watch.begin();
    expect(a.overlapped).toBe(false);
    expect(judgeRise(0, 1, a.overlapped)).toBe('mine');
    const b = watch.begin();
    expect([a.overlapped, b.overlapped]).toEqual([true, true]);
    expect(judgeRise(0, 1, b.overlapped)).toBe('unattributed');
    a.end();
    b.end();
    expect(watch.begin().overlapped).toBe(false);
    expect(judgeRise(2, 2, false)).toBe('none');
    expect(judgeRise(undefined, 5, false)).toBe('none');
  });

  it('never passes a transfer as clean when the counter is unreadable after it or went down (a reset)', () => {
    expect(judgeRise(3, undefined, false)).toBe('unverified');
    // vLLM's elastic DP scale-up registers the counters again at 0 (AsyncLLM.scale_elastic_ep): a rise can hide in it.
    expect(judgeRise(5, 1, false)).toBe('unverified');
    expect(judgeRise(5, 0, true)).toBe('unverified');
  });
});

describe('failedTransfersIn reads only the counter', () => {
  it('finds the counter past a malformed line of another metric, and gives no evidence when its own line is malformed', () => {
    const other = 'vllm:cache_config_info{block_size="16" 1\n';
    expect(failedTransfersIn(`${other}vllm:nixl_num_failed_transfers_total{engine="0"} 5\n`)).toBe(5);
    expect(failedTransfersIn('vllm:nixl_num_failed_transfers_total{engine="0" 5\n')).toBeUndefined();
  });

  it('matches the exact sample name only, and prefers _total over the bare name', () => {
    expect(failedTransfersIn('vllm:nixl_num_failed_transfers_total_created{engine="0"} 1.7e9\n')).toBeUndefined();
    const both = 'vllm:nixl_num_failed_transfers 9\nvllm:nixl_num_failed_transfers_total{engine="0"} 2\r\n';
    expect(failedTransfersIn(both)).toBe(2);
  });
});
