/** Options of loadModelSpec, passed down to the layout loaders. */
export interface LoadOptions {
  /**
   * Which graph to use when a package offers several: an Optimum variant name
   * (`fp32`, `fp16`, `quantized`, `q4`, …) or a graph file name.
   */
  graphVariant?: string;
  /**
   * ORT model packages: the execution provider the person picked for this model
   * (`cuda` or `CUDAExecutionProvider`). It must be offered by the package and
   * be in `availableBackends`. Default: the best usable one the package offers.
   */
  backend?: string;
  /**
   * ORT model packages: the providers this machine can really use (from
   * src/main/backends detectBackends). The loader cannot probe onnxruntime
   * itself (packages never import it), so without this list it assumes CPU only:
   * every onnxruntime build has it, and it is all the engine runs by default.
   */
  availableBackends?: string[];
  /** ORT model packages: pick this variant by name (it must still be usable on this machine). */
  variant?: string;
  /**
   * ORT model packages with `"layout": "installed"` may name files outside the
   * package (absolute paths, `..`); they load only when the person trusts them.
   */
  trustInstalled?: boolean;
  /**
   * The graph file to load, as an absolute path that was already checked
   * against the package's path rules. Set by the ORT package loader from
   * `executor_info.ort.model_file`; it wins over the layout's own graph rule.
   */
  graphFile?: string;
}
