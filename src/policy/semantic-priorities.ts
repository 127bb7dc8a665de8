/**
 * Checks of the route table's `priorities` (schema.ts `PrioritiesSchema`): a priority that does nothing, because the
 * pools its tenant is routed to do not declare `schedulingPolicy: priority` (the gate then stamps 0, since vLLM without
 * `--scheduling-policy priority` refuses any other), and a tenant name no model accepts (a typo, so the tenant meant
 * runs at the default). Both are warnings: the table still routes exactly as without the entry.
 */
import { closestMatch, listOf } from '../config/issues.js';
import type { CheckContext } from './semantic-groups.js';
import { tenantAllowed } from './schema.js';

export function checkPriorities(ctx: CheckContext): void {
  const { table } = ctx;
  const priorities = table.priorities;
  if (priorities === undefined) return;
  const models = Object.values(table.models);
  const openTenancy = models.some((m) => m.tenants.includes('*'));
  const known = new Set(models.flatMap((m) => m.tenants).filter((t) => t !== '*'));
  const fix =
    'declare schedulingPolicy: priority on those pools once their workers run `vllm serve --scheduling-policy priority` (vLLM refuses a priority other than 0 without it), or remove the priority';
  for (const [tenant, priority] of Object.entries(priorities.tenants)) {
    if (!openTenancy && !known.has(tenant)) {
      const guess = closestMatch(tenant, known);
      ctx.add(
        ['priorities', 'tenants', tenant],
        `tenant "${tenant}" has a priority, but no model accepts that tenant; a typo? (models accept: ${listOf(known)})`,
        guess === undefined ? 'spell it as in models.<model>.tenants' : `did you mean "${guess}"?`,
        'warning',
      );
      continue;
    }
    if (priority === 0) continue;
    const without = table.pools.filter((p) => tenantAllowed(p.tenants, tenant) && p.schedulingPolicy !== 'priority').map((p) => p.name);
    if (without.length > 0) {
      ctx.add(
        ['priorities', 'tenants', tenant],
        `tenant "${tenant}"'s priority ${priority} does nothing on pool(s) ${listOf(without)}: they do not declare schedulingPolicy: priority, so a request routed to any of them runs at 0`,
        fix,
        'warning',
      );
    }
  }
  if (priorities.default !== 0) {
    const without = table.pools.filter((p) => p.schedulingPolicy !== 'priority').map((p) => p.name);
    if (without.length > 0) {
      ctx.add(
        ['priorities', 'default'],
        `the default priority ${priorities.default} does nothing on pool(s) ${listOf(without)}: they do not declare schedulingPolicy: priority, so a request routed to any of them runs at 0`,
        fix,
        'warning',
      );
    }
  }
}
