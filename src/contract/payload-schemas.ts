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
