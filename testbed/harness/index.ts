/**
 * The harness's public surface for end-to-end tests and the local demo. Test support only: it stands in for Envoy
 * where no Envoy binary can run, and never replaces Envoy in a deployment (see README.md).
 */
export { loadEnvoyConfig, mustLoadEnvoyConfig, type EnvoyConfigError, type EnvoyConfigOverrides } from './envoy-config.js';
export type * from './envoy-config-types.js';
export {
  startEnvoyHarness,
  type AccessLogEntry,
  type EnvoyHarness,
  type EnvoyHarnessOptions,
  type ListenerHandle,
} from './data-plane.js';
export {
  continueAll,
  headersOf,
  reply,
  setHeader,
  startFakeExtProc,
  type FakeExtProc,
  type FakeExtProcStream,
  type FakeHandler,
} from './fake-ext-proc.js';
export { echoHandler, startFakeUpstream, type FakeUpstream, type RecordedRequest, type UpstreamHandler } from './fake-upstream.js';
export { fromStruct, toStruct, type WireProcessingRequest, type WireProcessingResponse } from './ext-proc-messages.js';
export type { AppendSemantics } from './header-mutation.js';
export { ENVOY_VERSIONS, type EnvoyVersion } from './runtime-config.js';
export {
  chunkedRequest,
  GIE_OVERRIDE_HOST_POLICY,
  ok,
  request,
  scenarioYaml,
  startScenario,
  type HttpResult,
  type Scenario,
  type ScenarioOptions,
} from './testing.js';
