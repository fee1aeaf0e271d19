/** Commands as a user runs them: a subprocess of `deno run` on a cli/ script, its exit code and output. */

export const ROOT = new URL("../../", import.meta.url).pathname;
const DEFAULT_PERMS = ["--allow-read", "--allow-write", "--allow-env"];
/** Environment passed through to commands (the WebGPU backend needs these on machines without a GPU). */
const PASS_THROUGH = ["DENO_WEBGPU_BACKEND", "XDG_RUNTIME_DIR"];

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** The environment commands run with: plain output, and the WebGPU settings passed through. */
export function cliEnv(): Record<string, string> {
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const k of PASS_THROUGH) {
    const v = Deno.env.get(k);
    if (v) env[k] = v;
  }
  return env;
}

export async function runCli(
  script: string,
  args: string[],
  perms = DEFAULT_PERMS,
  stdinFile?: string,
): Promise<CommandResult> {
  const piped = { stdin: "piped", stdout: "piped", stderr: "piped" } as const;
  const cmd = new Deno.Command(Deno.execPath(), {
    args: ["run", ...perms, `${ROOT}cli/${script}`, ...args],
    cwd: ROOT,
    env: cliEnv(),
    ...(stdinFile ? piped : {}),
  });
  // With stdinFile: the file's bytes piped to the command's standard input.
  const child = stdinFile ? cmd.spawn() : undefined;
  if (child) await (await Deno.open(stdinFile!)).readable.pipeTo(child.stdin);
  const out = child ? await child.output() : await cmd.output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** Runs `f` with a fresh temporary directory, removed afterwards. */
export async function withTemp<T>(f: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir();
  try {
    return await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Runs a command quietly; whether it succeeded (false where it cannot run). */
export async function sh(...args: string[]): Promise<boolean> {
  const quiet = { args: args.slice(1), stderr: "null", stdout: "null" } as const;
  return await new Deno.Command(args[0], quiet).output().then((o) => o.success, () => false);
}

/**
 * Whether this test may mount a tmpfs (root in a container, as CI runs), found by trying: Deno.uid() would
 * need --allow-sys, which the test task does not grant; a user who may not mount gets a quick failure.
 */
export async function mayMount(): Promise<boolean> {
  const probe = await Deno.makeTempDir();
  const ok = await sh("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe);
  if (ok) await sh("umount", probe);
  await Deno.remove(probe);
  return ok;
}
