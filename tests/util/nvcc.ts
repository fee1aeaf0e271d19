/**
 * nvcc for the compile-only tests (tests/nvcc/): which one (NVCC overrides) and its version line, or
 * undefined where it is not installed, so a test can say why it was ignored.
 */
export const NVCC = Deno.env.get("NVCC") ?? "nvcc";

/** For sm_90 with every warning an error: what each kernel we generate must compile under. */
export const NVCC_STRICT = ["-arch=sm_90", "-std=c++17", "-Werror", "all-warnings"] as const;

export async function nvccVersion(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(NVCC, { args: ["--version"], stdout: "piped", stderr: "piped" })
      .output();
    return out.success ? new TextDecoder().decode(out.stdout).trim().split("\n").pop() : undefined;
  } catch {
    return undefined;
  }
}
