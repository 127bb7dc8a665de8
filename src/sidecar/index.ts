/**
 * The worker sidecar's public surface: the command, the server factory, the status document, and the canary probes
 * `kvgate fingerprint` uses to record a known-good worker's digests.
 */
export { sidecarCommand, SIDECAR_USAGE } from './command.js';
export type { CommandIo } from './command.js';
export { createSidecar } from './server.js';
export type { Sidecar, SidecarDeps } from './server.js';
export { loadSidecarConfig, parseSidecarConfig, SidecarConfigSchema } from './config.js';
export type { SidecarConfig, SidecarConfigInput } from './config.js';
export type { SidecarStatus } from './status.js';
export { measureCanaries, observeWorker } from './probe.js';
export type { CanaryMeasurement, ProbeOptions } from './probe.js';
export { compareObservation } from './compare.js';
export type { Observation, ProbeVerdict } from './compare.js';
export {
  CANARY_SCHEME,
  CHAT_TEMPLATE_CANARY_MESSAGES,
  GENERATION_CANARY_MAX_TOKENS,
  GENERATION_CANARY_PROMPT,
  TOKENIZER_CANARY_TEXT,
  chatTemplateCanaryRequest,
  digestTokenIds,
  generationCanaryRequest,
  tokenizerCanaryRequest,
} from './canaries.js';
export type { CanaryDigests, CanaryKind } from './canaries.js';
export { RETRY_EXCLUDE_HEADER, SERVED_BY_HEADER } from './context.js';
export { ENGINE_CANARY_REQUEST_PREFIX, engineCanaryRequest } from './engine-canary.js';
export { parsePrometheusText } from './prometheus-text.js';
export type { PromSample } from './prometheus-text.js';
