/**
 * Chat templates for the simulated worker, chosen by the chat-template identity and revision.
 *
 * A template change changes the prompt tokens a chat request turns into, and therefore the KV a prefill worker
 * computes; a decode worker with another template reads KV for a prompt it would not have built. The style
 * (chatml, llama3, mistral) follows the template id (`PINNED_TEMPLATES`, else a guess from the id, else chatml);
 * the revision picks the preamble the template injects (a "knowledge cutoff" date line, as Llama 3 templates do),
 * derived from sha256(`id@revision`), so two revisions render differently (over 2,000 distinct preambles).
 * Pure: no I/O.
 */
import { createHash } from 'node:crypto';

export type ChatStyle = 'chatml' | 'llama3' | 'mistral';

export interface ChatTemplateProfile {
  readonly style: ChatStyle;
  /** Text the template injects ahead of the conversation; differs per revision. */
  readonly preamble: string;
  readonly source: 'pinned' | 'derived';
}

export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** Templates with a fixed rendering (see README "Chat templates"). */
export const PINNED_TEMPLATES: ReadonlyArray<{ id: string; revision: string; style: ChatStyle; preamble: string }> = [
  {
    id: 'meta-llama/Llama-3.1-8B-Instruct',
    revision: 'main',
    style: 'llama3',
    preamble: 'Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024',
  },
  {
    id: 'Qwen/Qwen2.5-7B-Instruct',
    revision: 'main',
    style: 'chatml',
    preamble: 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.',
  },
  { id: 'mistralai/Mistral-7B-Instruct-v0.3', revision: 'main', style: 'mistral', preamble: '' },
];

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

export function guessChatStyle(id: string): ChatStyle {
  if (/llama/i.test(id)) return 'llama3';
  if (/mistral|mixtral/i.test(id)) return 'mistral';
  return 'chatml';
}

export function resolveChatTemplate(t: { id: string; revision: string }): ChatTemplateProfile {
  const pinned = PINNED_TEMPLATES.find((p) => p.id === t.id && p.revision === t.revision);
  if (pinned) return { style: pinned.style, preamble: pinned.preamble, source: 'pinned' };
  const h = createHash('sha256').update(`${t.id}@${t.revision}`).digest();
  const year = 2020 + (h.readUInt32BE(0) % 8);
  const month = MONTHS[h.readUInt32BE(4) % 12]!;
  const day = 1 + (h.readUInt32BE(8) % 28);
  return {
    style: guessChatStyle(t.id),
    preamble: `Knowledge cutoff: ${month} ${year}\nToday Date: ${day} ${month} ${year + 1}`,
    source: 'derived',
  };
}

/**
 * Render a conversation to the prompt text vLLM would tokenize (special-token markers included; the tokenizer
 * recognises them). `addGenerationPrompt` appends the assistant header, as `add_generation_prompt` does. `kwargs` are
 * the chat template kwargs; the simulated templates declare two, as reasoning models' templates do: `reasoning_effort`
 * (a string: a `Reasoning: <effort>` line in the system preamble, as gpt-oss's and Qwen3.8's templates grade it) and
 * `enable_thinking` (false: chatml closes an empty think block after the generation prompt, as Qwen3's does).
 */
export function renderChat(
  profile: ChatTemplateProfile,
  messages: readonly ChatMessage[],
  opts: { addGenerationPrompt: boolean; kwargs?: Readonly<Record<string, unknown>> | undefined },
): string {
  const effort = opts.kwargs?.['reasoning_effort'];
  const preamble =
    typeof effort === 'string' ? [profile.preamble, `Reasoning: ${effort}`].filter((l) => l !== '').join('\n') : profile.preamble;
  switch (profile.style) {
    case 'chatml': {
      const out = renderChatml(preamble, messages, opts.addGenerationPrompt);
      return opts.addGenerationPrompt && opts.kwargs?.['enable_thinking'] === false ? `${out}<think>\n\n</think>\n\n` : out;
    }
    case 'llama3':
      return renderLlama3(preamble, messages, opts.addGenerationPrompt);
    case 'mistral':
      return renderMistral(preamble, messages);
  }
}

/**
 * The template kwargs of a chat completion on this vLLM version (flavour.ts `chatKwargs`). `request-fields-win`
 * follows `build_chat_params` and vLLM's `merge_kwargs` (vllm/renderers/params.py @017638d7: an override of None or
 * "auto" leaves the client's value).
 */
export function completionChatKwargs(
  how: 'request-fields-win' | 'client-wins',
  r: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  const c = r['chat_template_kwargs'];
  const user = c !== null && typeof c === 'object' && !Array.isArray(c) ? (c as Record<string, unknown>) : {};
  const documents = r['documents'];
  if (how === 'client-wins') return documents === undefined || documents === null ? { ...user } : { documents, ...user };
  const effort = r['reasoning_effort'];
  const extra: Record<string, unknown> = { documents, reasoning_effort: effort };
  if (effort !== undefined && effort !== null && !Object.hasOwn(user, 'enable_thinking')) extra['enable_thinking'] = effort !== 'none';
  const out: Record<string, unknown> = { ...user };
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null && v !== 'auto') out[k] = v;
  return out;
}

function renderChatml(preamble: string, messages: readonly ChatMessage[], gen: boolean): string {
  let out = '';
  if (messages[0]?.role !== 'system' && preamble !== '') out += `<|im_start|>system\n${preamble}<|im_end|>\n`;
  for (const m of messages) out += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
  if (gen) out += '<|im_start|>assistant\n';
  return out;
}

function renderLlama3(preamble: string, messages: readonly ChatMessage[], gen: boolean): string {
  const header = (role: string): string => `<|start_header_id|>${role}<|end_header_id|>\n\n`;
  let out = '<|begin_of_text|>';
  const rest = messages[0]?.role === 'system' ? messages.slice(1) : messages;
  const system = messages[0]?.role === 'system' ? messages[0].content : '';
  if (preamble !== '' || system !== '') {
    out += `${header('system')}${[preamble, system].filter((s) => s !== '').join('\n\n')}<|eot_id|>`;
  }
  for (const m of rest) out += `${header(m.role)}${m.content}<|eot_id|>`;
  if (gen) out += header('assistant');
  return out;
}

/** Mistral templates have no system role: the system text (and preamble) prefixes the first user turn. */
function renderMistral(preamble: string, messages: readonly ChatMessage[]): string {
  const system = messages.filter((m) => m.role === 'system').map((m) => m.content);
  const turns = messages.filter((m) => m.role !== 'system');
  let out = '<s>';
  let prefix = [preamble, ...system].filter((s) => s !== '').join('\n\n');
  for (const m of turns) {
    if (m.role === 'assistant') out += ` ${m.content}</s>`;
    else {
      out += `[INST] ${prefix === '' ? '' : `${prefix}\n\n`}${m.content}[/INST]`;
      prefix = '';
    }
  }
  return out;
}
