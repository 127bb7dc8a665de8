/**
 * The findings of one validation run: errors (Envoy would refuse the config) and warnings (it would load, but
 * uses something deprecated or unfinished), each located by a YAML path.
 */
import { formatPath } from './yaml-source.js';
import type { PathSegment } from './yaml-source.js';

/** One finding, located by its YAML path (`static_resources.clusters[0].connect_timeout`). */
export interface EnvoyIssue {
  readonly path: string;
  readonly segments: readonly PathSegment[];
  readonly message: string;
  /** 1-based line in the YAML text, where the caller had the text (validateEnvoyYaml does). */
  readonly line?: number;
}

/** Errors stop Envoy from loading the config; warnings (deprecated or work-in-progress fields) do not. */
export interface EnvoyValidationReport {
  readonly errors: readonly EnvoyIssue[];
  readonly warnings: readonly EnvoyIssue[];
}

/** An issue at `segments`. */
export function issueAt(segments: readonly PathSegment[], message: string): EnvoyIssue {
  return { path: formatPath(segments), segments: [...segments], message };
}

/** Collects findings while the walker descends. */
export class Findings {
  readonly errors: EnvoyIssue[] = [];
  readonly warnings: EnvoyIssue[] = [];

  error(segments: readonly PathSegment[], message: string): void {
    this.errors.push(issueAt(segments, message));
  }

  errorAll(segments: readonly PathSegment[], messages: readonly string[]): void {
    for (const m of messages) this.error(segments, m);
  }

  warn(segments: readonly PathSegment[], message: string): void {
    this.warnings.push(issueAt(segments, message));
  }

  report(): EnvoyValidationReport {
    return { errors: this.errors, warnings: this.warnings };
  }
}
