/** Small line icons drawn inline (emoji glyphs are missing from some Linux desktops' fonts). */

/** One stroked path in a square of `size` px (the viewBox is the same size), in the text's colour. */
function LineIcon(props: { size: 12 | 16; d: string; strokeWidth: number; cap?: boolean; join?: boolean }) {
  const { size, d, strokeWidth, cap = true, join = true } = props;
  return (
    <svg width={size} height={size} viewBox={`0 0 ${size} ${size}`} aria-hidden="true" className="icon">
      <path
        d={d}
        fill="none"
        stroke="currentColor"
        strokeWidth={strokeWidth}
        {...(cap ? { strokeLinecap: 'round' as const } : {})}
        {...(join ? { strokeLinejoin: 'round' as const } : {})}
      />
    </svg>
  );
}

/** A paper clip: attach files. */
export function PaperclipIcon() {
  return (
    <LineIcon
      size={16}
      d="M10.5 4.5 5.4 9.6a1.4 1.4 0 0 0 2 2l5.3-5.3a2.8 2.8 0 0 0-4-4L3.4 7.6a4.2 4.2 0 0 0 6 6L14 9"
      strokeWidth={1.3}
    />
  );
}

/** A page: an attached file. */
export function FileIcon() {
  return <LineIcon size={12} d="M3 1h4l3 3v7H3z M7 1v3h3" strokeWidth={1} cap={false} />;
}

/** A push pin: keeps a chat at the top of the list. */
export function PinIcon() {
  return <LineIcon size={12} d="M4.5 1.5h3M5 1.5v3L3 7h6L7 4.5v-3M6 7v3.5" strokeWidth={1.1} />;
}

/** Three lines: shows or hides the chat list (a narrow window's drawer). */
export function MenuIcon() {
  return <LineIcon size={16} d="M2.5 4h11M2.5 8h11M2.5 12h11" strokeWidth={1.4} join={false} />;
}
