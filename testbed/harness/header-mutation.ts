/**
 * Applies an ext_proc `HeaderMutation` to a header map the way Envoy's `MutationUtils::applyHeaderMutations` does
 * (source/extensions/filters/http/ext_proc/mutation_utils.cc), pure:
 * - removals first, then sets, in list order;
 * - the value comes from `raw_value` only: `value` alone sets an empty header (envoy#31555), both set is an error;
 * - invalid names/values are errors (500); rule refusals are ignored and counted, or errors under
 *   `disallow_is_error`; too many entries or an over-size result are errors.
 *
 * Append semantics: released Envoy (through 1.37; PRs #29862, #37139, #39066 were closed unmerged) reads only the
 * legacy `append` BoolValue, default false = overwrite, and ignores `append_action`. That is the default here
 * (`'envoy'`). `'append_action'` honours `append_action` (APPEND_IF_EXISTS_OR_ADD when unset; an explicit `append`
 * wins), for servers that want to be checked against the documented-but-unimplemented API too.
 */
import type { HeaderMap } from './header-map.js';
import { headerNameIsValid, headerValueIsValid, type CheckOperation, type MutationChecker } from './mutation-rules.js';
import type { WireHeaderMutation } from './ext-proc-messages.js';

export type AppendSemantics = 'envoy' | 'append_action';

/** Envoy's HCM defaults: `max_request_headers_count` 100 and `max_request_headers_kb` 60. */
export const MAX_HEADERS_COUNT = 100;
export const MAX_HEADERS_BYTES = 60 * 1024;

export interface MutationOptions {
  readonly checker: MutationChecker;
  /** CONTINUE_AND_REPLACE lets the server change `:method` whatever the rules say. */
  readonly replacingMessage: boolean;
  /** Set when Envoy already removed content-length for this body mode; a server cannot put it back. */
  readonly removeContentLength: boolean;
  readonly semantics: AppendSemantics;
  /** `send_header_raw_value` (runtime-config.ts): the value is read from `raw_value` (on) or from `value` (off). */
  readonly rawValue: boolean;
}

export interface MutationOutcome {
  /** `undefined` when everything applied; otherwise the error text Envoy puts in the 500's details. */
  readonly error: string | undefined;
  /** Entries refused by the rules (Envoy's `rejected_header_mutations`). */
  readonly rejected: number;
  /**
   * Entries whose effect would differ under the other append semantics (see the file comment): a server relying
   * on either reading of `append_action` shows up here (stat `harness.append_semantics_divergent`).
   */
  readonly divergent: number;
}

type Action = 'append' | 'overwrite' | 'skip';

/** Mutates `headers` in place; stops at the first error, as Envoy does (earlier entries stay applied). */
export function applyHeaderMutation(mutation: WireHeaderMutation, headers: HeaderMap, opts: MutationOptions): MutationOutcome {
  let rejected = 0;
  let divergent = 0;
  const done = (error?: string): MutationOutcome => ({ error, rejected, divergent });
  const removes = mutation.remove_headers ?? [];
  const sets = mutation.set_headers ?? [];
  if (removes.length > MAX_HEADERS_COUNT || sets.length > MAX_HEADERS_COUNT) {
    rejected++;
    return done(
      `Header mutation remove header count ${removes.length} or set header count ${sets.length} exceed the HCM header countlimit ${MAX_HEADERS_COUNT}`,
    );
  }
  for (const raw of removes) {
    if (!headerNameIsValid(raw)) {
      rejected++;
      return done('Invalid character in remove_headers mutation.');
    }
    const name = raw.toLowerCase();
    const result = opts.checker.check('REMOVE', name, '');
    if (result === 'OK') headers.remove(name);
    else {
      rejected++;
      if (result === 'FAIL') return done(`Invalid attempt to remove ${name}`);
    }
  }
  for (const option of sets) {
    const header = option.header;
    if (header === undefined || header === null) continue;
    const key = header.key ?? '';
    if (opts.removeContentLength && key.toLowerCase() === 'content-length') continue;
    const textValue = header.value ?? '';
    const rawValue = header.raw_value === undefined || header.raw_value === null ? '' : Buffer.from(header.raw_value).toString('latin1');
    if (textValue !== '' && rawValue !== '') {
      rejected++;
      return done('Only one of value or raw_value in the HeaderValue message should be set.');
    }
    // With send_header_raw_value on (the default since 1.27) Envoy reads raw_value only; off, value only.
    const value = opts.rawValue ? rawValue : Buffer.from(textValue, 'utf8').toString('latin1');
    if (!headerNameIsValid(key) || !headerValueIsValid(value)) {
      rejected++;
      return done('Invalid character in set_headers mutation.');
    }
    const name = key.toLowerCase();
    const exists = headers.has(name);
    const action = chooseAction(option, exists, opts.semantics);
    const other = chooseAction(option, exists, opts.semantics === 'envoy' ? 'append_action' : 'envoy');
    // Appending to an absent header adds it, like overwriting: only a different effect counts.
    if (effect(action, exists) !== effect(other, exists)) divergent++;
    if (action === 'skip') continue;
    const op: CheckOperation = action === 'append' && exists ? 'APPEND' : 'SET';
    let result = opts.checker.check(op, name, value);
    if (opts.replacingMessage && name === ':method') result = 'OK';
    if (result === 'OK') {
      if (action === 'append') headers.add(name, value);
      else headers.set(name, value);
    } else {
      rejected++;
      if (result === 'FAIL') return done(`Invalid attempt to modify ${name}`);
    }
  }
  if (headers.byteSize() > MAX_HEADERS_BYTES || headers.size > MAX_HEADERS_COUNT) {
    rejected++;
    return done(
      `Header mutation causes end result header count ${headers.size} or header size ${headers.byteSize()} bytes, exceeding the count limit ${MAX_HEADERS_COUNT} or the size limit ${MAX_HEADERS_BYTES / 1024} kilobytes`,
    );
  }
  return done();
}

function effect(action: Action, exists: boolean): Action {
  return action === 'append' && !exists ? 'overwrite' : action;
}

function chooseAction(option: NonNullable<WireHeaderMutation['set_headers']>[number], exists: boolean, semantics: AppendSemantics): Action {
  const legacy = option.append?.value;
  if (semantics === 'envoy' || legacy !== undefined) return legacy === true ? 'append' : 'overwrite';
  switch (option.append_action ?? 'APPEND_IF_EXISTS_OR_ADD') {
    case 'ADD_IF_ABSENT':
      return exists ? 'skip' : 'append';
    case 'OVERWRITE_IF_EXISTS_OR_ADD':
      return 'overwrite';
    case 'OVERWRITE_IF_EXISTS':
      return exists ? 'overwrite' : 'skip';
    default:
      return 'append';
  }
}
