/**
 * Physical cores as onnxruntime counts them for its default intra-op threads (one per physical core, not per
 * logical CPU). A VM that shows its 2 vCPUs as 1 core × 2 threads gets 1 default thread; one that shows 2 cores × 1
 * thread gets 2, the same as kvdesk's default. Linux sysfs only; null elsewhere or when it cannot be read.
 */
import { readdirSync, readFileSync } from 'node:fs';

export function physicalCores(): number | null {
  try {
    const base = '/sys/devices/system/cpu';
    const cores = new Set<string>();
    for (const name of readdirSync(base)) {
      if (!/^cpu\d+$/.test(name)) continue;
      const read = (f: string) => readFileSync(`${base}/${name}/topology/${f}`, 'utf8').trim();
      cores.add(`${read('physical_package_id')}:${read('core_id')}`);
    }
    return cores.size > 0 ? cores.size : null;
  } catch {
    return null;
  }
}
