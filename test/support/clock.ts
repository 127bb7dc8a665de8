/**
 * The one test clock. Pure modules take time as a value (`nowMs`), so a test names an instant instead of reading
 * the machine's clock: results never depend on how busy the machine is or on the day the suite runs.
 */

/** The instant tests decide, sign and verify at: 2026-01-01T00:00:00Z. */
export const TEST_NOW_MS = Date.UTC(2026, 0, 1);
