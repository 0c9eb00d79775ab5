/**
 * A graph input no port binding names is never fed, and onnxruntime refuses a run without it: such a package used
 * to load and then fail every request with "input 'attention_mask' is missing in 'feeds'". It is refused while it
 * is read now, naming the input and what binds it. Here with the real engine: the default model with its mask
 * renamed, and with its KV inputs named past.N.key|value.
 */
import { describe, expect, it } from 'vitest';
import { refusal } from '../../unit/packages/refusal';
import { copyDefault, editGraph, editsHost, renamePort } from './edited-default';

const edits = editsHost();

describe('graph inputs kvdesk would not feed', () => {
  it('the attention mask renamed attn_mask: refused at load, naming the input', async () => {
    const dir = await copyDefault('attn-mask');
    await editGraph(dir, (g) => renamePort(g, 'attention_mask', 'attn_mask'));
    const err = await refusal(edits.host.loadModel(dir), { file: 'onnx/model.onnx', field: 'input "attn_mask"' });
    expect(err.message).toContain('kvdesk feeds the attention mask as "attention_mask"');
  });

  it('KV inputs named past.N.key|value: refused at load, naming them', async () => {
    const dir = await copyDefault('past-names');
    await editGraph(dir, (g) => {
      for (let layer = 0; layer < 4; layer++) {
        for (const role of ['key', 'value']) renamePort(g, `past_key_values.${layer}.${role}`, `past.${layer}.${role}`);
      }
    });
    const err = await refusal(edits.host.loadModel(dir), { file: 'onnx/model.onnx', field: 'input "past.0.key"' });
    expect(err.message).toContain('"past.0.key" (float32 [batch_size, 2, past_sequence_length, 16])');
    expect(err.message).toContain('and 4 more');
  });
});
