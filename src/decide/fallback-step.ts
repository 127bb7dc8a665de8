/**
 * What every fallback step reads and may answer: the one vocabulary shared by the chain (`fallback.ts`) and its
 * steps (`queue-step.ts`, `route-via.ts`), kept apart so the steps do not import the chain that runs them.
 */
import type { CompiledRevision, CompiledRouteTable } from '../policy/compile.js';
import type { Candidate } from './pick.js';
import type { Shortage } from './targets.js';
import type { BoundGroup, FallbackRecord, OpenAiRequest, QueuedRequest, QueueOrder, QueueView, RequestFacts, Trace } from './types.js';
import type { WorkerView } from './worker-view.js';

export interface FallbackInput {
  readonly table: CompiledRouteTable;
  readonly view: WorkerView;
  readonly facts: RequestFacts;
  readonly body: OpenAiRequest;
  readonly nowMs: number;
  /** The caller's queues; without it the caller cannot hold requests and `queue` steps pass. */
  readonly queue?: QueueView;
  /** The longest the caller can hold a request (Envoy's max_message_timeout less a margin). */
  readonly maxWaitMs?: number;
  /** Set when a queued request is decided again. */
  readonly bound?: QueuedRequest;
  readonly revision: CompiledRevision;
  readonly group: BoundGroup;
  readonly pinned: boolean;
  readonly shortage: Shortage;
}

export type FallbackOutcome =
  | {
      readonly kind: 'wait';
      readonly step: number;
      readonly order: QueueOrder;
      readonly maxDepth: number;
      readonly enqueuedAtMs: number;
      readonly deadlineAtMs: number;
    }
  | {
      readonly kind: 'routeVia';
      readonly revision: CompiledRevision;
      readonly group: BoundGroup;
      readonly decode: Candidate;
      readonly prefill: Candidate | null;
    }
  | { readonly kind: 'recompute'; readonly decode: Candidate }
  | {
      readonly kind: 'refuse';
      readonly code: 'no_compatible_capacity' | 'queue_full' | 'queue_deadline_exceeded';
      readonly message: string;
      readonly retryAfterSeconds?: number;
    };

/** What each step function reads and appends to. */
export interface StepInput extends FallbackInput {
  readonly trace: Trace;
  readonly records: FallbackRecord[];
}
