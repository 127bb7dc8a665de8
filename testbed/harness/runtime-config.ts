/**
 * `layered_runtime` with static layers: the runtime guards that change how the ext_proc filter talks to the gate.
 * Other keys are refused (the harness implements nothing else a runtime could switch).
 *
 * - `envoy.reloadable_features.ext_proc_graceful_grpc_close` (FALSE_RUNTIME_GUARD since Envoy 1.34,
 *   envoyproxy/envoy source/common/runtime/runtime_features.cc at c9e9214): a finished ext_proc stream is
 *   half-closed and Envoy waits for the server's status (up to 1 s, then resets) instead of resetting it at once
 *   (source/extensions/filters/http/ext_proc/ext_proc.cc closeStreamMaybeGraceful at 2940127).
 * - `envoy.reloadable_features.ext_proc_stream_close_optimization` (RUNTIME_GUARD, on by default since 1.37,
 *   envoyproxy/envoy#41425): the stream is closed as soon as the last message that will be processed has been
 *   answered (`Filter::closeGrpcStreamIfLastRespReceived` in ext_proc.cc), e.g. right after `response_headers` when
 *   the response body mode is NONE and trailers are SKIP; buffered body modes are left out. `false` gives the
 *   lifetime of Envoy 1.36 and earlier, where the guard does not exist: the stream stays open until the HTTP
 *   request ends (`Filter::onDestroy`), so a streamed generation keeps it open for its whole length.
 *   Envoy 1.40.0 removed the guard and its legacy path ("Removed runtime flag
 *   envoy.reloadable_features.ext_proc_stream_close_optimization and legacy code paths", `changelogs/1.40.0.yaml`,
 *   envoyproxy/envoy at ffd4b26c): from 1.40 the stream always closes after the last processed response, and a
 *   static layer that still names the key changes nothing (Envoy's runtime keeps keys no code reads).
 * - `envoy.reloadable_features.send_header_raw_value` (RUNTIME_GUARD, on by default since 1.27: `changelogs/1.27.0.yaml`
 *   "header values are now encoded in this raw_value field when Envoy ext_proc filter sending and receiving messages",
 *   revertible with the guard; envoyproxy/envoy at 8b9304c6). One switch for both directions, in
 *   `source/extensions/filters/http/ext_proc/mutation_utils.cc` (envoyproxy/envoy at 4519ef40, the copy whose
 *   `applyHeaderMutations` takes `remove_content_length`, as 1.36/1.37 do): `headersToProto` fills `raw_value` with
 *   the bytes as they are, or, with the guard off, `value` with `MessageUtil::sanitizeUtf8String` of them (each byte
 *   that is not part of well-formed UTF-8 becomes `!`, `source/common/protobuf/utility.cc`); `applyHeaderMutations`
 *   reads a set header's value from `raw_value`, or with the guard off from `value` (the other field is ignored;
 *   both set is still the "Only one of value or raw_value" error). Whether 1.40 still has the guard was not read:
 *   the harness keeps it on every line.
 * Later layers override earlier ones, as Envoy's do.
 *
 * Which release line the harness plays is `startEnvoyHarness(config, { envoyVersion })` (default 1.37); on 1.36
 * the close-optimisation key has no effect, as the guard does not exist there yet, and on 1.40 none, as it is gone.
 */
import { type ConfigReader, isPlainObject } from './config-reader.js';

/**
 * The Envoy release line whose ext_proc stream lifetime the harness plays: 1.37 stands for 1.37 to 1.39 (README,
 * "Releases after 1.37"), 1.40 for 1.40 on, where the early close can no longer be turned off.
 */
export type EnvoyVersion = '1.36' | '1.37' | '1.40';

/**
 * The release lines whose default stream lifetimes differ, for tests that must hold on each
 * (`describe.each(ENVOY_VERSIONS)`). 1.40 is left out: by default it closes the stream exactly as 1.37 does; it
 * differs only where a `layered_runtime` turns the guard off (stream-lifetime.test.ts).
 */
export const ENVOY_VERSIONS: readonly EnvoyVersion[] = ['1.36', '1.37'];

/** Whether the filter closes its stream after the last processed response (1.37-1.39 with the guard on, 1.40+ always). */
export function closesAfterLastResponse(version: EnvoyVersion, runtime: RuntimeConfig): boolean {
  if (version === '1.40') return true;
  return version === '1.37' && runtime.extProcStreamCloseOptimization;
}

export interface RuntimeConfig {
  readonly extProcGracefulGrpcClose: boolean;
  readonly extProcStreamCloseOptimization: boolean;
  /** Header values travel in `raw_value` (true, the default) or sanitised in `value` (false). */
  readonly sendHeaderRawValue: boolean;
}

const GRACEFUL = 'envoy.reloadable_features.ext_proc_graceful_grpc_close';
const CLOSE_OPT = 'envoy.reloadable_features.ext_proc_stream_close_optimization';
const RAW_VALUE = 'envoy.reloadable_features.send_header_raw_value';
const KEYS: ReadonlySet<string> = new Set([GRACEFUL, CLOSE_OPT, RAW_VALUE]);

export const DEFAULT_RUNTIME: RuntimeConfig = {
  extProcGracefulGrpcClose: false,
  extProcStreamCloseOptimization: true,
  sendHeaderRawValue: true,
};

export function readLayeredRuntime(r: ConfigReader, value: unknown): RuntimeConfig {
  if (value === undefined) return DEFAULT_RUNTIME;
  const o = r.obj(value, 'layered_runtime', ['layers']);
  const values: Record<string, unknown> = {};
  r.arr(o['layers'], 'layered_runtime.layers').forEach((layer, i) => {
    const p = `layered_runtime.layers[${i}]`;
    const l = r.obj(layer, p, ['name', 'static_layer']);
    r.requiredStr(l['name'], `${p}.name`);
    const st = l['static_layer'];
    if (st === undefined) return;
    if (!isPlainObject(st)) {
      r.issue(`${p}.static_layer`, 'expected a mapping');
      return;
    }
    for (const [k, v] of Object.entries(st)) {
      if (!KEYS.has(k)) r.issue(`${p}.static_layer["${k}"]`, 'unsupported by the kvgate harness');
      else if (typeof v !== 'boolean') r.issue(`${p}.static_layer["${k}"]`, 'must be true or false');
      else values[k] = v;
    }
  });
  const closeOpt = (values[CLOSE_OPT] as boolean | undefined) ?? DEFAULT_RUNTIME.extProcStreamCloseOptimization;
  return {
    extProcGracefulGrpcClose: (values[GRACEFUL] as boolean | undefined) ?? DEFAULT_RUNTIME.extProcGracefulGrpcClose,
    extProcStreamCloseOptimization: closeOpt,
    sendHeaderRawValue: (values[RAW_VALUE] as boolean | undefined) ?? DEFAULT_RUNTIME.sendHeaderRawValue,
  };
}
