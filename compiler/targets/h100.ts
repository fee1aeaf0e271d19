/**
 * Device rates of the cost model (report/cost_model.ts): the few rates a kernel's predicted time is
 * made of, in one named table per device so that a prediction can be read, cited and recalibrated without
 * hunting for constants. A datasheet peak is kept beside the fraction of it taken as achievable; the
 * fractions are the model's assumptions, to be replaced by what a GPU run measures (`--measured`).
 */
export interface DeviceRates {
  /** Shown in the report. */
  readonly name: string;
  /** Which plans it predicts: a CUDA plan's kernel sources and library calls. */
  readonly target: "cuda";
  /** Dense FP16/BF16 tensor-core peak with FP32 accumulation, FLOP/s (library GEMMs run there). */
  readonly tensorPeak: number;
  /** Share of `tensorPeak` a cuBLASLt GEMM of BERT's shapes reaches. */
  readonly tensorFraction: number;
  /** FP32 CUDA-core peak, FLOP/s (the template GEMM has no mma instruction, so it runs here). */
  readonly fp32Peak: number;
  /** Share of `fp32Peak` the template GEMM reaches (it spills registers, loads B uncoalesced). */
  readonly templateFraction: number;
  /** Achievable device-memory bandwidth, bytes/s, counting bytes read plus bytes written. */
  readonly bandwidth: number;
  /** The memory's datasheet peak, bytes/s, for the report's sake. */
  readonly bandwidthPeak: number;
  /** Fixed cost of one launch (a kernel, a library call or a copy) inside a CUDA graph, seconds. */
  readonly launch: number;
  /**
   * Threads a kernel needs in flight to reach `bandwidth` (and the arithmetic rates). A kernel launching
   * fewer (one thread per row of a few thousand rows, one per column of a scatter) gets the rates scaled by
   * its share: memory parallelism is what feeds HBM (Little's law: bandwidth × latency bytes in flight).
   */
  readonly saturatingThreads: number;
}

export const H100_SXM: DeviceRates = {
  name: "NVIDIA H100 SXM5 80GB (sm_90)",
  target: "cuda",
  // NVIDIA H100 Tensor Core GPU datasheet (2023): H100 SXM FP16/BF16 Tensor Core 1,979 TFLOPS "with
  // sparsity"; dense is half, 989.4 TFLOP/s.
  tensorPeak: 989.4e12,
  // This workplace measured an 8192³ bf16 product at 798 TFLOP/s on an H100 (0.81 of peak, device
  // KINDS.md, 2026-11-13); BERT's GEMMs are smaller (K = 1024, attention's 128×128×64 batches), so 0.6.
  tensorFraction: 0.6,
  // Same datasheet: FP32 67 TFLOPS (SXM).
  fp32Peak: 67e12,
  // An assumption, not a measurement: issue 16 reads 255 registers, spills and uncoalesced B loads off
  // the template's SASS; a quarter of the FMA peak is generous for such a kernel.
  templateFraction: 0.25,
  // Datasheet: 3.35 TB/s HBM3. Measured here: a device-to-device copy moved about 3.0 TB/s counting bytes
  // read and written (device KINDS.md, 2026-11-13); a well-formed streaming kernel gets about as much.
  bandwidth: 3.0e12,
  bandwidthPeak: 3.35e12,
  // A kernel node of a replayed CUDA graph: about 2 µs of launch latency and ramp-up/tail on a 132-SM
  // device for a short kernel (an assumption to calibrate; the whole graph replay is one cuGraphLaunch).
  launch: 2e-6,
  // Half the device's resident threads (132 SMs × 2048): 3 TB/s × ~0.6 µs latency is ~1.8 MB in flight,
  // ~13 bytes per thread at this count, about what a thread with one or two loads outstanding keeps. An
  // assumption to calibrate with the measured column.
  saturatingThreads: 132 * 1024,
};

/** The devices the fusion report predicts for, per target, first the one the goals are for. */
export const DEVICE_RATES: readonly DeviceRates[] = [H100_SXM];
