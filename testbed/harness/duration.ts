/**
 * Durations as Envoy reads them: protobuf JSON strings with an `s` suffix ("2s", "0.200s", "0s") in YAML, and
 * `google.protobuf.Duration` objects ({seconds, nanos}) on the wire. Envoy refuses "200ms", so the harness does too.
 */
import type { Result } from '../../src/errors.js';

const DURATION_RE = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/;

/** YAML duration to whole milliseconds (Envoy truncates to ms with `PROTOBUF_GET_MS_OR_DEFAULT`). */
export function parseEnvoyDuration(value: unknown): Result<number, string> {
  if (typeof value === 'string') {
    const m = DURATION_RE.exec(value);
    if (!m || m[1] !== undefined) {
      return { ok: false, error: `"${value}" is not a non-negative duration like "2s" or "0.200s" (Envoy needs the "s" suffix)` };
    }
    const nanos = Number((m[3] ?? '').padEnd(9, '0'));
    return { ok: true, value: Number(m[2]) * 1000 + Math.floor(nanos / 1e6) };
  }
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const wire = fromWireDuration(value);
    if (wire.ok && wire.value >= 0) return wire;
    return { ok: false, error: 'expected a non-negative duration' };
  }
  return { ok: false, error: `expected a duration string like "2s", got ${JSON.stringify(value)}` };
}

/**
 * A decoded `google.protobuf.Duration` ({seconds: string|number, nanos: number}) to milliseconds, refusing values
 * Envoy's `DurationUtil::durationToMillisecondsNoThrow` refuses (nanos out of range, mixed signs).
 */
export function fromWireDuration(value: object): Result<number, string> {
  const d = value as { seconds?: unknown; nanos?: unknown };
  const seconds = Number(d.seconds ?? 0);
  const nanos = Number(d.nanos ?? 0);
  if (!Number.isFinite(seconds) || !Number.isInteger(nanos) || Math.abs(nanos) >= 1e9) {
    return { ok: false, error: 'duration out of range' };
  }
  if ((seconds > 0 && nanos < 0) || (seconds < 0 && nanos > 0)) return { ok: false, error: 'duration signs differ' };
  if (Math.abs(seconds) > 315_576_000_000) return { ok: false, error: 'duration out of range' };
  return { ok: true, value: seconds * 1000 + Math.trunc(nanos / 1e6) };
}
