import { describe, expect, it } from 'vitest';
import { guessChatStyle, renderChat, resolveChatTemplate } from './chat-template.js';

const convo = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hello?' },
];

describe('chat templates', () => {
  it('renders llama3 style with the generation prompt only when asked', () => {
    const p = resolveChatTemplate({ id: 'meta-llama/Llama-3.1-8B-Instruct', revision: 'main' });
    expect(p.source).toBe('pinned');
    const gen = renderChat(p, convo, { addGenerationPrompt: true });
    expect(gen).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHello?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(renderChat(p, convo, { addGenerationPrompt: false })).toBe(gen.slice(0, gen.lastIndexOf('<|start_header_id|>')));
  });

  it('renders chatml with a default system prompt when none is given', () => {
    const p = resolveChatTemplate({ id: 'Qwen/Qwen2.5-7B-Instruct', revision: 'main' });
    expect(renderChat(p, [{ role: 'user', content: 'Hi' }], { addGenerationPrompt: true })).toBe(
      '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('folds the system prompt into the first user turn for mistral', () => {
    const p = resolveChatTemplate({ id: 'mistralai/Mistral-7B-Instruct-v0.3', revision: 'main' });
    const text = renderChat(p, [...convo, { role: 'assistant', content: 'Yes.' }, { role: 'user', content: 'More' }], {
      addGenerationPrompt: true,
    });
    expect(text).toBe('<s>[INST] Be brief.\n\nHello?[/INST] Yes.</s>[INST] More[/INST]');
  });

  it('a template revision change changes the rendered prompt', () => {
    const a = resolveChatTemplate({ id: 'acme/llama-3-8b-instruct', revision: 'tmpl-a' });
    const b = resolveChatTemplate({ id: 'acme/llama-3-8b-instruct', revision: 'tmpl-b' });
    expect(a.style).toBe('llama3');
    expect(renderChat(a, convo, { addGenerationPrompt: true })).not.toBe(renderChat(b, convo, { addGenerationPrompt: true }));
    expect(resolveChatTemplate({ id: 'acme/llama-3-8b-instruct', revision: 'tmpl-a' })).toEqual(a);
  });

  it('guesses the style from the id', () => {
    expect(guessChatStyle('org/Mixtral-8x7B')).toBe('mistral');
    expect(guessChatStyle('org/whatever')).toBe('chatml');
  });
});
