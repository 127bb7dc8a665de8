/**
 * Zod pieces shared by the token payload schemas. Payloads are validated after the signature verifies, so a
 * failure here means the issuer and verifier disagree on the format (a version skew), never an attack.
 */
import { z } from 'zod';

export const nonEmpty = z.string().min(1);

/** Milliseconds since the epoch; integral so the JSON round trip is exact. */
export const epochMs = z.number().int().nonnegative();

/** A validity window that is not empty or inverted. */
export function hasValidWindow(v: { issuedAtMs: number; expiresAtMs: number }): boolean {
  return v.expiresAtMs > v.issuedAtMs;
}

export const WINDOW_MESSAGE = { message: 'expiresAtMs must be after issuedAtMs', path: ['expiresAtMs'] };

/** A lowercase hex sha256 digest (64 characters), as `node:crypto` writes one. */
export const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'expected a lowercase hex sha256 digest (64 characters)');
