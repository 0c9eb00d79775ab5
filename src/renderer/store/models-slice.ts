/** Loaded models, the active one, and the outcome of the last package drop. */
import type { StateCreator } from 'zustand/vanilla';
import type { AppState, ModelsSlice } from './types';

export const createModelsSlice: StateCreator<AppState, [], [], ModelsSlice> = (set) => ({
  models: [],
  activeModelId: null,
  packageImport: null,
  unloaded: [],
  busyModels: [],

  setModels(models) {
    set((s) => {
      // Keep the person's choice while it stays loaded; otherwise fall back to the default, then the first.
      const keep = s.activeModelId !== null && models.some((m) => m.id === s.activeModelId);
      const fallback = models.find((m) => m.isDefault)?.id ?? models[0]?.id ?? null;
      const roots = new Set(models.map((m) => m.spec.root));
      return {
        models,
        activeModelId: keep ? s.activeModelId : fallback,
        unloaded: s.unloaded.filter((p) => !roots.has(p.root)),
      };
    });
  },

  setActiveModel(id) {
    set({ activeModelId: id });
  },

  setPackageImport(state) {
    set({ packageImport: state });
  },

  setModelBusy(id, busy) {
    set((s) => ({
      busyModels: busy ? [...s.busyModels.filter((b) => b !== id), id] : s.busyModels.filter((b) => b !== id),
    }));
  },

  rememberUnloaded(pkg) {
    set((s) => ({ unloaded: [...s.unloaded.filter((p) => p.root !== pkg.root), pkg] }));
  },

  forgetUnloaded(root) {
    set((s) => ({ unloaded: s.unloaded.filter((p) => p.root !== root) }));
  },
});
