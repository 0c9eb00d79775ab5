/** Options of loadModelSpec, passed down to the layout loaders. */
export interface LoadOptions {
  /**
   * Which graph to use when a package offers several: an Optimum variant name
   * (`fp32`, `fp16`, `quantized`, `q4`, …) or a graph file name.
   */
  graphVariant?: string;
}
