/**
 * The CUDA driver API (libcuda.so.1) through Deno FFI, and a thin checked wrapper over it, with C types as
 * checked against CUDA 13.0's cuda.h (DESIGN.md, notes: runtime/cuda/driver.ts). Every call goes through
 * `check`: a non-zero status throws a CudaError naming the call, the status (cuGetErrorName) and the
 * kernel, when the caller says which.
 */
import { CudaError, CudaUnavailableError } from "./cuda_errors.ts";
import { discover, type DiscoverOptions, openDiscovered } from "./libs.ts";

export const DRIVER_SYMBOLS = {
  cuInit: { parameters: ["u32"], result: "i32" },
  cuDriverGetVersion: { parameters: ["buffer"], result: "i32" },
  cuGetErrorName: { parameters: ["i32", "buffer"], result: "i32" },
  cuGetErrorString: { parameters: ["i32", "buffer"], result: "i32" },
  cuDeviceGetCount: { parameters: ["buffer"], result: "i32" },
  cuDeviceGet: { parameters: ["buffer", "i32"], result: "i32" },
  cuDeviceGetAttribute: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  cuDeviceGetName: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  cuDevicePrimaryCtxRetain: { parameters: ["buffer", "i32"], result: "i32" },
  cuDevicePrimaryCtxRelease_v2: { parameters: ["i32"], result: "i32" },
  cuCtxSetCurrent: { parameters: ["pointer"], result: "i32" },
  cuCtxSynchronize: { parameters: [], result: "i32" },
  cuMemGetInfo_v2: { parameters: ["buffer", "buffer"], result: "i32" },
  cuMemAlloc_v2: { parameters: ["buffer", "usize"], result: "i32" },
  cuMemFree_v2: { parameters: ["u64"], result: "i32" },
  cuMemcpyHtoD_v2: { parameters: ["u64", "buffer", "usize"], result: "i32" },
  cuMemcpyDtoH_v2: { parameters: ["buffer", "u64", "usize"], result: "i32" },
  cuMemcpyDtoDAsync_v2: { parameters: ["u64", "u64", "usize", "pointer"], result: "i32" },
  cuMemsetD8_v2: { parameters: ["u64", "u8", "usize"], result: "i32" },
  cuMemsetD8Async: { parameters: ["u64", "u8", "usize", "pointer"], result: "i32" },
  cuStreamCreate: { parameters: ["buffer", "u32"], result: "i32" },
  cuStreamDestroy_v2: { parameters: ["pointer"], result: "i32" },
  cuStreamSynchronize: { parameters: ["pointer"], result: "i32" },
  cuEventCreate: { parameters: ["buffer", "u32"], result: "i32" },
  cuEventDestroy_v2: { parameters: ["pointer"], result: "i32" },
  cuEventRecord: { parameters: ["pointer", "pointer"], result: "i32" },
  cuEventSynchronize: { parameters: ["pointer"], result: "i32" },
  // cuda.h 12.8+ maps cuEventElapsedTime to _v2 (same signature); older drivers have only the first.
  cuEventElapsedTime_v2: { parameters: ["buffer", "pointer", "pointer"], result: "i32", optional: true },
  cuEventElapsedTime: { parameters: ["buffer", "pointer", "pointer"], result: "i32", optional: true },
  cuModuleLoadData: { parameters: ["buffer", "buffer"], result: "i32" },
  cuModuleUnload: { parameters: ["pointer"], result: "i32" },
  cuModuleGetFunction: { parameters: ["buffer", "pointer", "buffer"], result: "i32" },
  // (f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes, stream, kernelParams, extra)
  cuLaunchKernel: {
    parameters: ["pointer", "u32", "u32", "u32", "u32", "u32", "u32", "u32", "pointer", "buffer", "pointer"],
    result: "i32",
  },
  cuStreamBeginCapture_v2: { parameters: ["pointer", "i32"], result: "i32" },
  cuStreamEndCapture: { parameters: ["pointer", "buffer"], result: "i32" },
  cuGraphInstantiateWithFlags: { parameters: ["buffer", "pointer", "u64"], result: "i32" },
  cuGraphLaunch: { parameters: ["pointer", "pointer"], result: "i32" },
  cuGraphExecDestroy: { parameters: ["pointer"], result: "i32" },
  cuGraphDestroy: { parameters: ["pointer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

type DriverSymbols = Deno.DynamicLibrary<typeof DRIVER_SYMBOLS>["symbols"];

// Values from cuda.h (CUdevice_attribute, CUstreamCaptureMode, stream and event flags).
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
/** Flags 0: a blocking stream, ordered with the legacy default stream that cuMemcpyHtoD/DtoH use. */
const CU_STREAM_DEFAULT = 0;
const CU_EVENT_DEFAULT = 0;

/** Names for the statuses most likely to be seen, for when cuGetErrorName itself is unusable. */
const KNOWN_STATUS: Record<number, string> = {
  1: "CUDA_ERROR_INVALID_VALUE",
  2: "CUDA_ERROR_OUT_OF_MEMORY",
  3: "CUDA_ERROR_NOT_INITIALIZED",
  4: "CUDA_ERROR_DEINITIALIZED",
  35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
  100: "CUDA_ERROR_NO_DEVICE",
  101: "CUDA_ERROR_INVALID_DEVICE",
  200: "CUDA_ERROR_INVALID_IMAGE",
  209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
  218: "CUDA_ERROR_INVALID_PTX",
  500: "CUDA_ERROR_NOT_FOUND",
  700: "CUDA_ERROR_ILLEGAL_ADDRESS",
  701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
  702: "CUDA_ERROR_LAUNCH_TIMEOUT",
  719: "CUDA_ERROR_LAUNCH_FAILED",
  900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
  999: "CUDA_ERROR_UNKNOWN",
};

export type Pointer = Deno.PointerValue;
/** A device address (CUdeviceptr). */
export type DevicePtr = bigint;

/** A C string for a const char* parameter. */
export function cString(s: string): Uint8Array<ArrayBuffer> {
  const bytes = new TextEncoder().encode(s);
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}

/** The handle an out-parameter received. */
function pointerOut(slot: BigUint64Array): Pointer {
  return Deno.UnsafePointer.create(slot[0]);
}

export interface DeviceInfo {
  readonly ordinal: number;
  readonly name: string;
  /** Compute capability, e.g. [9, 0] for Hopper. */
  readonly capability: readonly [number, number];
  readonly smCount: number;
  readonly totalBytes: number;
  /** Driver API version, e.g. 13000 for CUDA 13.0. */
  readonly driverVersion: number;
}

/**
 * An opened driver with device `ordinal`'s primary context current on this thread. All calls are
 * synchronous FFI calls on the JavaScript thread, which is the thread the context is current on.
 */
export class CudaDriver {
  private closed = false;

  private constructor(
    private readonly lib: Deno.DynamicLibrary<typeof DRIVER_SYMBOLS>,
    readonly path: string,
    readonly device: number,
    readonly context: Pointer,
    readonly info: DeviceInfo,
  ) {}

  /**
   * Loads libcuda, initializes it and makes device `ordinal`'s primary context current. Throws
   * CudaUnavailableError when the library is missing or no GPU is visible, CudaError for anything else.
   */
  static open(ordinal = 0, opts: DiscoverOptions = {}): CudaDriver {
    const found = discover("cuda", opts);
    const { lib, path } = openDiscovered(found, DRIVER_SYMBOLS);
    try {
      const s = lib.symbols;
      const init = s.cuInit(0);
      if (init !== 0) {
        throw new CudaUnavailableError(
          `${path} loaded, but cuInit failed with ${statusName(s, init)}: no usable NVIDIA GPU (is the ` +
            `driver running and a device visible?)`,
          found.searched,
        );
      }
      const i32 = new Int32Array(1);
      check(s, "cuDeviceGetCount", s.cuDeviceGetCount(i32));
      if (i32[0] <= ordinal) {
        throw new CudaUnavailableError(
          `${path} loaded, but it sees ${i32[0]} CUDA device(s); device ${ordinal} was asked for`,
          found.searched,
        );
      }
      check(s, "cuDeviceGet", s.cuDeviceGet(i32, ordinal));
      const dev = i32[0];
      const attr = (a: number, what: string) => {
        check(s, `cuDeviceGetAttribute(${what})`, s.cuDeviceGetAttribute(i32, a, dev));
        return i32[0];
      };
      const major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability major");
      const minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability minor");
      const smCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count");
      const nameBuf = new Uint8Array(256);
      check(s, "cuDeviceGetName", s.cuDeviceGetName(nameBuf, nameBuf.length, dev));
      const name = new TextDecoder().decode(nameBuf.subarray(0, Math.max(0, nameBuf.indexOf(0))));
      check(s, "cuDriverGetVersion", s.cuDriverGetVersion(i32));
      const driverVersion = i32[0];
      const ctxOut = new BigUint64Array(1);
      check(s, "cuDevicePrimaryCtxRetain", s.cuDevicePrimaryCtxRetain(ctxOut, dev));
      const ctx = pointerOut(ctxOut);
      check(s, "cuCtxSetCurrent", s.cuCtxSetCurrent(ctx));
      const free = new BigUint64Array(1), total = new BigUint64Array(1);
      check(s, "cuMemGetInfo", s.cuMemGetInfo_v2(free, total));
      const info: DeviceInfo = {
        ordinal,
        name,
        capability: [major, minor],
        smCount,
        totalBytes: Number(total[0]),
        driverVersion,
      };
      return new CudaDriver(lib, path, dev, ctx, info);
    } catch (e) {
      lib.close();
      throw e;
    }
  }

  /** The symbols, for callers that need a call this wrapper does not cover. */
  get symbols(): DriverSymbols {
    this.alive();
    return this.lib.symbols;
  }

  /** Throws a CudaError for a non-zero status: the call, the status name and the kernel if given. */
  check(call: string, status: number, kernel?: string): void {
    check(this.lib.symbols, call, status, kernel);
  }

  /** "sm_90" for compute capability 9.0. */
  get arch(): string {
    return `sm_${this.info.capability[0]}${this.info.capability[1]}`;
  }

  memGetInfo(): { free: number; total: number } {
    const free = new BigUint64Array(1), total = new BigUint64Array(1);
    this.check("cuMemGetInfo", this.symbols.cuMemGetInfo_v2(free, total));
    return { free: Number(free[0]), total: Number(total[0]) };
  }

  alloc(bytes: number, what: string): DevicePtr {
    const out = new BigUint64Array(1);
    const status = this.symbols.cuMemAlloc_v2(out, BigInt(bytes));
    if (status !== 0) {
      const { free, total } = safeMemInfo(this);
      throw new CudaError(
        `cuMemAlloc(${bytes} bytes for ${what}) failed with ${statusName(this.lib.symbols, status)}` +
          (free >= 0 ? ` (${free} of ${total} bytes free on ${this.info.name})` : ""),
      );
    }
    return out[0];
  }

  free(ptr: DevicePtr): void {
    this.check("cuMemFree", this.symbols.cuMemFree_v2(ptr));
  }

  memsetD8(ptr: DevicePtr, value: number, bytes: number): void {
    this.check("cuMemsetD8", this.symbols.cuMemsetD8_v2(ptr, value, BigInt(bytes)));
  }

  /** Fills `bytes` bytes with `value` in stream order (capturable into a graph as a memset node). */
  memsetD8Async(ptr: DevicePtr, value: number, bytes: number, stream: Pointer, what: string): void {
    if (bytes === 0) return;
    this.check(`cuMemsetD8Async (${what})`, this.symbols.cuMemsetD8Async(ptr, value, BigInt(bytes), stream));
  }

  /** Host to device; synchronous with respect to the host buffer (the legacy default stream). */
  copyHtoD(dst: DevicePtr, src: Uint8Array<ArrayBuffer>, what: string): void {
    if (src.byteLength === 0) return;
    this.check(`cuMemcpyHtoD (${what})`, this.symbols.cuMemcpyHtoD_v2(dst, src, BigInt(src.byteLength)));
  }

  /** Device to host; returns once the bytes are in `dst`. */
  copyDtoH(dst: Uint8Array<ArrayBuffer>, src: DevicePtr, what: string): void {
    if (dst.byteLength === 0) return;
    this.check(`cuMemcpyDtoH (${what})`, this.symbols.cuMemcpyDtoH_v2(dst, src, BigInt(dst.byteLength)));
  }

  copyDtoDAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: Pointer, what: string): void {
    if (bytes === 0) return;
    this.check(
      `cuMemcpyDtoDAsync (${what})`,
      this.symbols.cuMemcpyDtoDAsync_v2(dst, src, BigInt(bytes), stream),
    );
  }

  createStream(): Pointer {
    const out = new BigUint64Array(1);
    this.check("cuStreamCreate", this.symbols.cuStreamCreate(out, CU_STREAM_DEFAULT));
    return pointerOut(out);
  }

  destroyStream(stream: Pointer): void {
    this.check("cuStreamDestroy", this.symbols.cuStreamDestroy_v2(stream));
  }

  synchronize(stream: Pointer, what = "cuStreamSynchronize"): void {
    this.check(what, this.symbols.cuStreamSynchronize(stream));
  }

  createEvent(): Pointer {
    const out = new BigUint64Array(1);
    this.check("cuEventCreate", this.symbols.cuEventCreate(out, CU_EVENT_DEFAULT));
    return pointerOut(out);
  }

  destroyEvent(ev: Pointer): void {
    this.check("cuEventDestroy", this.symbols.cuEventDestroy_v2(ev));
  }

  recordEvent(ev: Pointer, stream: Pointer): void {
    this.check("cuEventRecord", this.symbols.cuEventRecord(ev, stream));
  }

  /** Milliseconds between two recorded (and completed) events. */
  elapsedMs(start: Pointer, end: Pointer): number {
    const s = this.symbols;
    const f = s.cuEventElapsedTime_v2 ?? s.cuEventElapsedTime;
    if (!f) throw new CudaError(`${this.path} exports neither cuEventElapsedTime_v2 nor cuEventElapsedTime`);
    const out = new Float32Array(1);
    this.check("cuEventElapsedTime", f(out, start, end));
    return out[0];
  }

  /** Loads a CUBIN image and returns its module. */
  loadModule(image: Uint8Array<ArrayBuffer>, kernel: string): Pointer {
    const out = new BigUint64Array(1);
    // The driver reads the image's length from its ELF header; the buffer only has to stay alive.
    this.check("cuModuleLoadData", this.symbols.cuModuleLoadData(out, image), kernel);
    return pointerOut(out);
  }

  unloadModule(module: Pointer): void {
    this.check("cuModuleUnload", this.symbols.cuModuleUnload(module));
  }

  getFunction(module: Pointer, name: string, kernel: string): Pointer {
    const out = new BigUint64Array(1);
    this.check(
      `cuModuleGetFunction('${name}')`,
      this.symbols.cuModuleGetFunction(out, module, cString(name)),
      kernel,
    );
    return pointerOut(out);
  }

  /**
   * Launches `fn` with `params`, the kernelParams array (see KernelArgs): grid in blocks, block of
   * `threads` × 1 × 1, no dynamic shared memory.
   */
  launch(
    fn: Pointer,
    grid: readonly [number, number, number],
    threads: number,
    stream: Pointer,
    params: KernelArgs,
    kernel: string,
  ): void {
    this.check(
      "cuLaunchKernel",
      this.symbols.cuLaunchKernel(
        fn,
        grid[0],
        grid[1],
        grid[2],
        threads,
        1,
        1,
        0,
        stream,
        params.array,
        null,
      ),
      kernel,
    );
  }

  beginCapture(stream: Pointer): void {
    this.check(
      "cuStreamBeginCapture",
      this.symbols.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
    );
  }

  /** Ends a capture and instantiates the graph; the graph itself is destroyed (its exec stays). */
  endCaptureAndInstantiate(stream: Pointer): Pointer {
    const g = new BigUint64Array(1);
    this.check("cuStreamEndCapture", this.symbols.cuStreamEndCapture(stream, g));
    const graph = pointerOut(g);
    try {
      const exec = new BigUint64Array(1);
      this.check("cuGraphInstantiateWithFlags", this.symbols.cuGraphInstantiateWithFlags(exec, graph, 0n));
      return pointerOut(exec);
    } finally {
      this.check("cuGraphDestroy", this.symbols.cuGraphDestroy(graph));
    }
  }

  /** Ends a capture that failed part-way, discarding whatever was captured (errors ignored). */
  abandonCapture(stream: Pointer): void {
    const g = new BigUint64Array(1);
    if (this.lib.symbols.cuStreamEndCapture(stream, g) === 0 && g[0] !== 0n) {
      this.lib.symbols.cuGraphDestroy(pointerOut(g));
    }
  }

  launchGraph(exec: Pointer, stream: Pointer, what: string): void {
    this.check(`cuGraphLaunch (${what})`, this.symbols.cuGraphLaunch(exec, stream));
  }

  destroyGraphExec(exec: Pointer): void {
    this.check("cuGraphExecDestroy", this.symbols.cuGraphExecDestroy(exec));
  }

  /** Releases the primary context and unloads the library; everything made on it is gone. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.lib.symbols.cuDevicePrimaryCtxRelease_v2(this.device);
    this.lib.close();
  }

  private alive(): void {
    if (this.closed) throw new CudaError("the CUDA driver was closed");
  }
}

/**
 * V8 keeps typed arrays of up to 64 bytes inside the JavaScript heap, where the garbage collector may move
 * them; an address taken of one and used later could go stale. Arrays whose address outlives the call
 * that took it are therefore made at least this many bytes long, which puts them off the heap.
 */
const OFF_HEAP_BYTES = 128;

/**
 * cuLaunchKernel's kernelParams: an array of pointers, the i-th pointing at the value of parameter i.
 * Every parameter of our kernels is a device pointer (8 bytes), so the values live in one BigUint64Array
 * and the array of their addresses in another. Both must stay alive as long as launches use them (a
 * captured graph copies the values at capture time).
 */
export class KernelArgs {
  readonly values: BigUint64Array<ArrayBuffer>;
  readonly array: BigUint64Array<ArrayBuffer> | null;

  constructor(pointers: readonly DevicePtr[]) {
    const room = Math.max(pointers.length, OFF_HEAP_BYTES / 8);
    this.values = new BigUint64Array(room);
    this.values.set(pointers);
    if (pointers.length === 0) {
      this.array = null;
      return;
    }
    const base = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(this.values)));
    this.array = new BigUint64Array(room);
    for (let i = 0; i < pointers.length; i++) this.array[i] = base + BigInt(8 * i);
  }
}

/**
 * A `const char* const*` argument: the strings, NUL-terminated, packed into one off-heap buffer, and the
 * array of their addresses. Keep the returned object alive until the call returns.
 */
export function cStringArray(strings: readonly string[]): {
  bytes: Uint8Array<ArrayBuffer>;
  pointers: BigUint64Array<ArrayBuffer>;
} {
  const enc = strings.map((s) => new TextEncoder().encode(s));
  const total = enc.reduce((a, e) => a + e.length + 1, 0);
  const bytes = new Uint8Array(Math.max(total, OFF_HEAP_BYTES));
  const pointers = new BigUint64Array(Math.max(strings.length, OFF_HEAP_BYTES / 8));
  const base = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(bytes)));
  let at = 0;
  enc.forEach((e, i) => {
    bytes.set(e, at);
    pointers[i] = base + BigInt(at);
    at += e.length + 1;
  });
  return { bytes, pointers };
}

function check(s: DriverSymbols, call: string, status: number, kernel?: string): void {
  if (status === 0) return;
  throw new CudaError(`${call} failed with ${statusName(s, status)}${kernel ? ` (kernel ${kernel})` : ""}`);
}

/** "CUDA_ERROR_X (code)": the driver's own name for a status, else ours, else the number. */
export function statusName(s: Pick<DriverSymbols, "cuGetErrorName">, status: number): string {
  const out = new BigUint64Array(1);
  try {
    if (s.cuGetErrorName(status, out) === 0 && out[0] !== 0n) {
      const p = Deno.UnsafePointer.create(out[0]);
      if (p) return `${Deno.UnsafePointerView.getCString(p)} (${status})`;
    }
  } catch {
    // fall through to the table
  }
  return `${KNOWN_STATUS[status] ?? "CUDA error"} (${status})`;
}

function safeMemInfo(d: CudaDriver): { free: number; total: number } {
  try {
    return d.memGetInfo();
  } catch {
    return { free: -1, total: -1 };
  }
}
