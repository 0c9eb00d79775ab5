/** turnModel (src/renderer/lib/turn-model.ts): the model a chat's next turn goes to, open or not. */
import { describe, expect, it } from 'vitest';
import { turnModel } from '../../../src/renderer/lib/turn-model';

const state = {
  activeThreadId: 'open',
  activeModelId: 'picked',
  models: [{ id: 'picked' }, { id: 'own' }, { id: 'later' }],
  threads: [{ id: 'open', modelId: 'own' }, { id: 'elsewhere', modelId: 'own' }, { id: 'fresh' }],
};

describe('turnModel', () => {
  it("the open chat's next turn goes to the picker's model", () => {
    expect(turnModel(state, 'open')).toBe('picked');
    expect(turnModel(state, 'open', 'later')).toBe('picked');
  });

  it('a chat in the background keeps its own model: the pick made in it, else its replies', () => {
    expect(turnModel(state, 'elsewhere')).toBe('own');
    expect(turnModel(state, 'elsewhere', 'later')).toBe('later');
  });

  it("a chat whose model is not loaded, or that has none, goes to the picker's", () => {
    expect(turnModel({ ...state, models: [{ id: 'picked' }] }, 'elsewhere')).toBe('picked');
    expect(turnModel(state, 'fresh')).toBe('picked');
  });
});
