/**
 * Signed tokens shared by the gate and the sidecars: the transfer contract, the prefill attestation, the sticky
 * binding, plus the key ring that signs them and the tenant/group cache salt. Pure crypto (node:crypto), except
 * `loadKeyRing`, which reads the key file at startup.
 */
export {
  createDevKeyRing,
  createKeyRing,
  isInsecureKeyRing,
  KEY_ID_PATTERN,
  loadKeyRing,
  MIN_SECRET_BYTES,
  parseKeyRing,
} from './keys.js';
export type { KeyRing, KeyRingOptions, LoadKeyRingOptions } from './keys.js';
export { mintContract, TransferContractSchema, verifyContract } from './contract.js';
export type { ContractExpectations, ContractFailure, TransferContract } from './contract.js';
export { AttestationSchema, mintAttestation, verifyAttestation } from './attestation.js';
export type { Attestation, AttestationExpectations, AttestationFailure } from './attestation.js';
export { BindingSchema, mintBinding, verifyBinding } from './binding.js';
export type { Binding, BindingExpectations, BindingFailure } from './binding.js';
export { deriveCacheSalt } from './cache-salt.js';
export { CLOCK_SKEW_MS, MAX_TOKEN_CHARS, TOKEN_PREFIX } from './token.js';
export type { EnvelopeFailureReason, TokenFailure, TokenKind } from './token.js';
