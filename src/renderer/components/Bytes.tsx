/** A byte figure in binary units; the exact integer is in the tooltip and in data-bytes (tests read it). */
import { exactBytes, formatBytes } from '../lib/format';

export function Bytes({ value, testId, className }: { value: number; testId?: string; className?: string }) {
  return (
    <span className={`num ${className ?? ''}`} title={exactBytes(value)} data-bytes={value} data-testid={testId}>
      {formatBytes(value)}
    </span>
  );
}
