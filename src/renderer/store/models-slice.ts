/** Loaded models, the active one, the library of packages loaded before, and the outcome of the last package drop. */
import type { StateCreator } from 'zustand/vanilla';
import type { AppState, ModelsSlice } from './types';

export const createModelsSlice: StateCreator<AppState, [], [], ModelsSlice> = (set) => ({
  models: [],
  activeModelId: null,
  packageImport: null,
  library: [],
  busyModels: [],
  downloads: [],

  setDownloads(list) {
    set({ downloads: list });
  },

  setModels(models) {
    set((s) => {
      // Keep the person's choice while it stays loaded; otherwise fall back to the default, then the first.
      const keep = s.activeModelId !== null && models.some((m) => m.id === s.activeModelId);
      const fallback = models.find((m) => m.isDefault)?.id ?? models[0]?.id ?? null;
      return { models, activeModelId: keep ? s.activeModelId : fallback };
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

  setLibrary(entries) {
    set({ library: entries });
  },
});
