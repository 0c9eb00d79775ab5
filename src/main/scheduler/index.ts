/** The KV scheduler's public surface; the host imports from here only. */

export {
  type CpuBudgetInputs,
  deriveCpuBudget,
  explicitDerivation,
  formatBytes,
  formatBytesApart,
  parseByteSize,
} from './budget';
export {
  createScheduler,
  type FinishOptions,
  type ReconfigureOptions,
  type ReconfigureOutcome,
  type Scheduler,
  type SchedulerOptions,
  type SubmitAccepted,
} from './scheduler';
