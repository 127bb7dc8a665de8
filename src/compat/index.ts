/**
 * The compatibility core: what a KV block means (descriptor, normalisation, fingerprint, group id), whether it can
 * move between two workers (connector rules), and what vLLM's own NIXL handshake will say (hash prediction).
 * Pure: no I/O, no clock, no logger.
 */
export {
  ArchitectureSchema,
  CompatDescriptorSchema,
  ConnectorSchema,
  deepFreeze,
  EngineSchema,
  KV_SCALE_SCHEMES,
  KvCacheSchema,
  parseDescriptor,
  PositionSchema,
  RevisionedIdSchema,
  RopeScalingSchema,
} from './descriptor.js';
export type { CompatDescriptor, CompatDescriptorInput, KvScaleScheme } from './descriptor.js';
export { canonicalJson } from './canonical-json.js';
export {
  FP8_DEFAULT_FORMAT,
  formatNormalizeIssues,
  isQuantizedKvDtype,
  normalizeAttentionBackend,
  normalizeDescriptor,
  normalizeId,
  normalizeKvDtype,
  normalizeModelDtype,
} from './normalize.js';
export type { NormalizedDescriptor, NormalizeIssue } from './normalize.js';
export {
  describeFingerprintDiff,
  FINGERPRINT_FIELDS,
  FINGERPRINT_SCHEME,
  fingerprintOf,
  fingerprintOfNormalized,
  fingerprintSubset,
  GROUP_ID_PREFIX,
  groupIdOf,
  readField,
  tryFingerprintOf,
} from './fingerprint.js';
export type { DiffSides, FingerprintField } from './fingerprint.js';
export { checkDescriptor, checkTransfer, CONNECTOR_RULES, findConnectorRule, NIXL_RULE } from './connector-rules.js';
export type { CompatMode, CompatVerdict, ConnectorRule, Findings, RawPair } from './connector-rules.js';
export {
  KNOWN_NIXL_VERSIONS,
  NEWEST_KNOWN_NIXL_VERSION,
  NIXL_FACTOR_SETS,
  nixlFactors,
  predictNixlHash,
  pythonFloatRepr,
  pythonJsonDumps,
  sha256Hex,
  torchDtypeString,
} from './nixl-hash.js';
export type { FactorSet, NixlHashPrediction } from './nixl-hash.js';
