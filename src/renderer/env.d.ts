// Vite bundles CSS imports; the type checker only needs to know they exist.
declare module '*.css';
