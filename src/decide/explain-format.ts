/**
 * `kvgate explain` output for people: the rollout in force, the steps from the decision core's trace, numbered,
 * then what the client or upstream sees. A refusal shows its status, code, message, headers and JSON body; a wait
 * shows the queue step and the 504 the client gets if nothing frees in time.
 */
import type { ClientRefusal, Explanation } from './explain.js';

/** The explanation as text, ending with a newline. */
export function formatExplanation(e: Explanation): string {
  const out: string[] = [`kvgate explain: request ${e.requestId}`, 'rollout:', ...e.rollout.map((l) => `  ${l}`)];
  if (e.removedHeaders.length > 0) out.push(`removed client-sent gate-owned headers: ${e.removedHeaders.join(', ')}`);
  out.push('steps:', ...e.trace.map((l, i) => `  ${i + 1}. ${l}`));
  out.push(...decisionLines(e));
  return `${out.join('\n')}\n`;
}

function decisionLines(e: Explanation): string[] {
  const d = e.decision;
  switch (d.kind) {
    case 'route': {
      const prefill =
        d.prefill === null
          ? 'none (served without disaggregation)'
          : `${d.prefill.cluster} ${d.prefill.endpoint ?? ''} (pool ${d.prefill.pool})`.trim();
      return [
        `decision: route to group ${d.group.id} (model ${d.group.model}, revision ${d.group.revision}, tenant ${d.group.tenant ?? 'none'}, scope ${d.group.tenantScope})`,
        `  decode: ${d.decode.cluster} ${d.decode.endpoint ?? ''} (pool ${d.decode.pool})`,
        `  prefill: ${prefill}`,
        `  body: cache_salt set to ${d.cacheSalt} (derived from the group and tenant scope)`,
        '  headers stamped toward upstream:',
        ...headerLines(e.upstreamHeaders ?? {}, '    '),
        ...Object.entries(e.upstreamMetadata ?? {}).map(([ns, fields]) => `  Envoy dynamic metadata ${ns}: ${JSON.stringify(fields)}`),
        '  headers added to the response to the client:',
        ...headerLines(e.responseHeaders ?? {}, '    '),
      ];
    }
    case 'hop':
      return [
        `decision: hop (prefill leg) inside group ${d.group.id} (model ${d.group.model}, revision ${d.group.revision})`,
        `  prefill: ${d.prefill.cluster} ${d.prefill.endpoint ?? ''} (pool ${d.prefill.pool})`,
        '  headers stamped toward upstream:',
        ...headerLines(e.upstreamHeaders ?? {}, '    '),
      ];
    case 'refuse':
      return ['decision: refuse', ...refusalLines(e.refusal!, '  ')];
    case 'answer': {
      const a = e.answer!;
      return [
        `decision: answered by the gateway itself (no worker): HTTP ${a.status}`,
        '  headers:',
        ...headerLines(a.headers, '    '),
        `  body: ${JSON.stringify(a.body)}`,
      ];
    }
    case 'wait': {
      const w = e.wait!;
      const lines = [
        `decision: wait in the ${d.order} queue of group ${d.group.id} (model ${d.group.model}, revision ${d.group.revision}) for ${d.missing} capacity (fallback step ${d.step})`,
        `  deadline: ${w.deadlineMs} ms; ${w.ahead} request(s) ahead; queue maxDepth ${d.maxDepth}`,
        `  Envoy: the gate first sends override_message_timeout ${w.overrideMessageTimeoutMs} ms, so Envoy's message_timeout does not fire while it waits`,
        `  if ${d.missing} capacity of the group frees before the deadline: the request is decided again inside group ${d.group.id} and routed`,
        `  if not, at the deadline (decided again with nothing freed): ${w.atDeadline.kind}`,
      ];
      if (w.atDeadline.refusal !== undefined) lines.push(...refusalLines(w.atDeadline.refusal, '    '));
      return lines;
    }
  }
}

function refusalLines(r: ClientRefusal, indent: string): string[] {
  return [
    `${indent}HTTP ${r.status} ${r.code}`,
    `${indent}message: ${r.message}`,
    `${indent}headers:`,
    ...headerLines(r.headers, `${indent}  `),
    `${indent}body: ${JSON.stringify(r.body)}`,
  ];
}

function headerLines(h: Readonly<Record<string, string>>, indent: string): string[] {
  return Object.entries(h).map(([k, v]) => `${indent}${k}: ${v}`);
}
