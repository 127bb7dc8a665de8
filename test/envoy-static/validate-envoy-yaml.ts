/**
 * Static validation of Envoy YAML against Envoy's own protos (loaded by proto-root.ts). No Envoy binary runs on
 * these machines, so this is how the suite shows the shipped envoy/*.yaml would load: every key must be a field
 * of the message at that point, enums must name values, `@type` must name a message that exists, values must
 * have the JSON form protobuf's parser takes, at most one member of a oneof may be set, and the common
 * protoc-gen-validate rules hold. It is structural: cross-references (a route's cluster exists, a listener's
 * port is free) and runtime semantics are not checked; that is `envoy --mode validate`'s job.
 */
import type { Root } from 'protobufjs';
import { BOOTSTRAP_TYPE } from './proto-root.js';
import { Findings, issueAt } from './report.js';
import type { EnvoyIssue, EnvoyValidationReport } from './report.js';
import { findMessageType } from './type-index.js';
import { walkMessage } from './walk-message.js';
import { lineOf, parseYamlDocuments } from './yaml-source.js';
import type { PathSegment, YamlDocument } from './yaml-source.js';

export type { EnvoyIssue, EnvoyValidationReport } from './report.js';
export type { PathSegment } from './yaml-source.js';

export interface ValidateOptions {
  /** Prefix for every path, when the value sits inside a larger document (an Istio patch value). */
  readonly basePath?: readonly PathSegment[];
  /**
   * A partial message that Envoy (or Istio) merges into an existing one (EnvoyFilter MERGE): fields that are
   * present are checked as usual, but nothing is required to be present.
   */
  readonly partial?: boolean;
}

/**
 * Validates an already-parsed value (from YAML or JSON) as the Envoy message `typeName`. Returns every finding;
 * never throws for a bad config. Throws only if `typeName` itself is not a message in the Root (a caller bug).
 */
export function validateEnvoyValue(root: Root, typeName: string, value: unknown, options: ValidateOptions = {}): EnvoyValidationReport {
  const type = findMessageType(root, typeName);
  if (!type) throw new Error(`validateEnvoyValue: ${typeName} is not a message type in the loaded protos`);
  const findings = new Findings();
  walkMessage({ root, findings, partial: options.partial ?? false }, type, value, [...(options.basePath ?? [])]);
  return findings.report();
}

/** Adds source lines to a report's issues (paths relative to the document `source`). */
export function withLines(report: EnvoyValidationReport, source: YamlDocument): EnvoyValidationReport {
  const locate = (i: EnvoyIssue): EnvoyIssue => {
    const line = lineOf(source, i.segments);
    return line === undefined ? i : { ...i, line };
  };
  return { errors: report.errors.map(locate), warnings: report.warnings.map(locate) };
}

/**
 * Validates YAML text holding one Envoy message (by default the bootstrap that `envoy -c` reads). YAML syntax
 * errors (including duplicate keys) are reported as errors at the root path, with their line.
 */
export function validateEnvoyYaml(root: Root, text: string, typeName: string = BOOTSTRAP_TYPE): EnvoyValidationReport {
  const { docs, syntaxErrors } = parseYamlDocuments(text);
  if (syntaxErrors.length > 0) {
    return { errors: syntaxErrors.map((e) => ({ ...issueAt([], `YAML: ${e.message}`), line: e.line })), warnings: [] };
  }
  const [first, ...more] = docs;
  if (!first || more.length > 0) {
    return { errors: [issueAt([], `expected exactly one YAML document, found ${String(docs.length)}`)], warnings: [] };
  }
  return withLines(validateEnvoyValue(root, typeName, first.value), first);
}
